#!/usr/bin/env bash
# Device session of 2026-11-27, fourth call (issue 36): the compiled engine at 4, 8 and 16 ranks around
# the rule's thresholds: native, the rule as shipped now (compiled-aware), the rule's configuration served
# at every size, and binomial 128K uncapped; MPICH. Output tarred into $OUT.
RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/d4; mkdir -p $OUT
IMPLS=(--impl native --impl adaptcoll --impl "adaptcoll:native_below=0"
       --impl "adaptcoll:native_below=0;segment_size=128K;max_segments=0")
for launch in 1 2; do
  step osu8_l$launch 60 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,2M,4M,8M,16M --budget 0.3 --min-iterations 5 --seed $launch --quiet "${IMPLS[@]}" \
    --json "$OUT/osu8_compiled_l$launch.json"
done
step osu4_l1 60 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
  --sizes 1M,2M,4M,8M,16M --budget 0.3 --min-iterations 5 --seed 1 --quiet "${IMPLS[@]}" \
  --json "$OUT/osu4_compiled_l1.json"
step osu16_l3 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
  --sizes 2M,4M,8M --budget 0.3 --min-iterations 5 --seed 3 --quiet "${IMPLS[@]}" \
  --json "$OUT/osu16_compiled_l3.json"
tar czf $RES/d4.tgz -C /tmp d4
cat $OUT/steps.txt
