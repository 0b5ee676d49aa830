#!/bin/sh
# A host whose Python never starts answering (hung NFS home, a stuck site-packages import).
echo "loading site environment..."
exec sleep 3
