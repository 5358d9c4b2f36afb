#!/usr/bin/env bash
# Codecs on the SSD tier (issue 14, part 5): trains a ResNet with --policy ferry --tier ssd at
# fractions of its no-swap peak with each --codec, side by side in one invocation (rounds
# interleaved, the codec order rotating every round), and prints per budget the median iteration
# time of each codec and its ratio to `none`, and the disk bytes the SSD tier measured.
# Usage: bench/codec_ssd.sh [--quick] [bench/codec_ssd.py options]; see bench/codec_ssd.py --help.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ferry="$root/build/ferry"
[[ -x $ferry ]] || ferry="$("$root/scripts/build.sh")/ferry"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
exec /usr/bin/python3 "$root/bench/codec_ssd.py" --ferry "$ferry" "$@"
