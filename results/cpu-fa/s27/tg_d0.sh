#!/usr/bin/env bash
# the issue's d0 decode cells as session 26 measured them (PROCS processes x 3 interleaved rounds, five pairs, tg64), here
#   PROCS="1 2 3 4 5 6" bash results/cpu-fa/s27/tg_d0.sh
cd "$(dirname "$0")/../../.." && O=results/cpu-fa/s27 exec bash results/cpu-fa/s26/tg_d0.sh
