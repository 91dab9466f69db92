#!/bin/bash
# alternate base (ee9f692 worktree) and new (working tree), swapped order each round
cd /work/main; export PATH=/work/main/.venv/bin:$PATH
OUT=/tmp/ab_out4; mkdir -p $OUT
run() { # side engine round
  side=$1; eng=$2; k=$3
  if [ $side = base ]; then PP=/tmp/base_tree; else PP=/tmp/new_tree; fi
  PYTHONPATH=$PP ADAPTCOLL_ENGINE=$eng timeout 300 mpiexec -n 2 -bind-to core python bench/fixed_cost.py --iters 1000 --blocks 9 --json $OUT/fc_${eng}_${side}_$k.json > $OUT/fc_${eng}_${side}_$k.txt 2>&1
}
for k in 1 2 3 4 5 6; do
  for eng in python compiled; do
    if [ $((k%2)) = 1 ]; then run base $eng $k; run new $eng $k; else run new $eng $k; run base $eng $k; fi
  done
done
echo done > $OUT/DONE
