#!/usr/bin/env bash
# Device session of 2026-11-27, one call: the guide's minimum (device_session.sh first), then more
# 16-rank launches while time is left; everything tarred into $OUT (the tool returns at most 8 files).
RES=$OUT
export OUT=/tmp/d1; mkdir -p $OUT
t0=$SECONDS
timeout -k 5 390 bash bench/device_session.sh first
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/d1
for launch in 3 4; do
  [ $((SECONDS - t0)) -lt 390 ] || break
  step osu16_mpich_l$launch 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu16_mpich_l$launch.json"
done
if [ $((SECONDS - t0)) -lt 400 ]; then
  step osu16_ompi_l2 60 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed 2 --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu16_ompi_l2.json"
fi
tar czf $RES/d1.tgz -C /tmp d1
cat $OUT/steps.txt
