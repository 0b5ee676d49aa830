#!/bin/bash
# old vs new fleet at $1 hosts, alternated, $2 reps
cd "$(git rev-parse --show-toplevel)"; REPO=$PWD
for i in $(seq 1 $2); do
  for t in old new; do
    if [ $((i % 2)) = 0 ]; then [ $t = old ] && t=new || t=old; fi
    if [ $t = old ]; then d=/tmp/old; else d=$REPO; fi
    (cd $d && PYTHONPATH=$d timeout 600 python3 -m bench --only fleet --sizes $1 --hosts-nice 19 2>/tmp/mb/fab19_${t}_$i.log >/tmp/mb/fab19_${t}_$i.md)
    echo "$t rep $i: $(grep '^\[fleet\]' /tmp/mb/fab19_${t}_$i.log | tail -1)"
  done
done
