#!/bin/bash
cd /work/main; export PATH=/work/main/.venv/bin:$PATH
OUT=/tmp/ab_osu; mkdir -p $OUT
run() { side=$1; k=$2; n=$3
  if [ $side = base ]; then PP=/tmp/base_tree; else PP=/tmp/new_tree; fi
  PYTHONPATH=$PP ADAPTCOLL_ENGINE=python timeout 300 mpiexec -n $n python bench/osu.py -c allreduce --sizes 8,64K,256K --budget 0.3 --min-iterations 20 --impl native --impl "adaptcoll:native_below=0" --json $OUT/n${n}_${side}_$k.json > $OUT/n${n}_${side}_$k.txt 2>&1
}
for n in 4 2; do for k in 1 2 3 4; do
  if [ $((k%2)) = 1 ]; then run base $k $n; run new $k $n; else run new $k $n; run base $k $n; fi
done; done
echo done > $OUT/DONE
