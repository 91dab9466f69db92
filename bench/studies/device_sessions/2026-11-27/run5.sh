#!/usr/bin/env bash
# Device session of 2026-11-27, fifth call (issue 36): bench/engine_cost.py again with each engine's
# Bcast as a persistent request decided once (the first method switched ADAPTCOLL_ENGINE per call), MPICH
# and Open MPI; and Reduce/Allreduce 4M at 16 ranks, native against binomial 128K, three more launches.
RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/d5; mkdir -p $OUT
step engine_cost_mpich 60 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/engine_cost.py --mpi --repeats 9
step engine_cost_ompi 60 "${OMPI[@]}" mpiexec -n 2 --bind-to core python3 bench/engine_cost.py --mpi --repeats 9
for launch in 4 5 6; do
  step osu16_4M_l$launch 40 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c reduce,allreduce \
    --sizes 4M --budget 0.5 --min-iterations 8 --seed $launch --quiet --impl native --impl adaptcoll \
    --impl "adaptcoll:native_below=0;segment_size=128K;max_segments=0" --json "$OUT/osu16_4M_l$launch.json"
done
tar czf $RES/d5.tgz -C /tmp d5
cat $OUT/steps.txt
