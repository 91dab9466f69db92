#!/usr/bin/env bash
# Device session of 2026-11-27, second call (the machine still warm after run1.sh): CuPy end to end at
# 4 and 2 ranks, 8 ranks MPICH x2, noise at 16 ranks (16 MiB, quiet and 100 Hz x 250 us, one launch
# each). This is the inline command that ran, one step a line; output tarred into $OUT.
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT2=$OUT; export OUT=/tmp/d2; mkdir -p $OUT
for n in 4 2; do
  step osu_gpu_${n}ranks 70 "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 64K,1M,16M,64M --impl adaptcoll --impl staged --budget 1 \
    --min-iterations 5 --quiet --json "$OUT/osu_gpu_${n}ranks.json"
done
for l in 1 2; do
  step osu8_mpich_l$l 50 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed $l --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu8_mpich_l$l.json"
done
for nz in quiet 100Hz; do
  a=(); [ $nz = 100Hz ] && a=(--noise "100Hz x 250us")
  step noise16_$nz 50 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 16M --budget 1.0 --min-iterations 10 --seed 1 --quiet --impl native --impl adaptcoll "${a[@]}" \
    --json $OUT/noise16_$nz.json
done
tar czf $OUT2/d2.tgz -C /tmp d2
cat $OUT/steps.txt
