#!/bin/sh
# meganode-store with --durability fsync: every member keeps raft's log on disk and fdatasyncs before acknowledging
exec "$(dirname "$0")/meganode-store" --durability fsync "$@"
