#!/bin/sh
# Removes from a production node_modules what Node.js never loads at run time: type declarations, source maps,
# and docs. test/lab/operator-image.test.ts loads every agent and drives each cloud SDK in the built image.
#
#   prune-node-modules.sh NODE_MODULES
set -eu
nm="${1:?usage: prune-node-modules.sh NODE_MODULES}"
find "$nm" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \
  -o -iname 'README*' -o -iname 'CHANGELOG*' -o -iname 'HISTORY.md' -o -name '*.md' -o -name '*.markdown' \) -delete
find "$nm" -type d -empty -delete
