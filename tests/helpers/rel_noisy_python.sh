#!/bin/sh
# A host whose login prints to stdout before any command runs (an rc file's echo, a MOTD), then Python.
echo "Welcome to gpu-host-7"
printf '\033[1;32mLast login: yesterday\033[0m\n'
echo '{"not": "the agent"'
exec python3 "$@"
