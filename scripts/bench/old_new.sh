#!/usr/bin/env bash
# Two release binaries side by side, alternately old then new, three rounds: the idle
# overhead at 10 Hz, 100 Hz and 1 kHz (scripts/bench/overhead.sh, with its C floor loop as
# the yardstick) and the service with 100 runs (scripts/bench/daemon.sh). A refactor is
# within budget when the medians agree within 5%.
# Usage: OLD=path/to/old/watchdog NEW=target/release/watchdog scripts/bench/old_new.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD=${OLD:?the old binary}
NEW=${NEW:-target/release/watchdog}
for round in 1 2 3; do
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    echo "=== round $round $which overhead load $(cut -d' ' -f1 /proc/loadavg)"
    WATCHDOG=$bin RATES="10 100 1000" TARGETS="idle" DURATION=10 EARLYOOM=0 bash scripts/bench/overhead.sh 2>&1 | grep -E "watchdog|c-floor"
    echo "=== round $round $which daemon load $(cut -d' ' -f1 /proc/loadavg)"
    WATCHDOG=$bin COUNTS="100" DURATION=10 bash scripts/bench/daemon.sh 2>&1 | grep "^  100"
  done
done
