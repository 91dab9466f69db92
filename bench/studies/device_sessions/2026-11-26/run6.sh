# synthesized forests for real at 16 ranks (one node, bench/results/device_2026-11-26/forest16/), Bcast,
# interleaved with native, the rule, and two_tree at the same segment sizes; 3 launches
RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o6; mkdir -p $OUT
F=bench/results/device_2026-11-26/forest16
impls=(--impl native --impl adaptcoll)
for seg in 512K 1536K; do
  impls+=(--impl "adaptcoll:bcast_algorithm=two_tree;bcast_segment_size=$seg;max_segments=0")
  for k in k2f2 k4f4 k8f2; do
    impls+=(--impl "adaptcoll:bcast_algorithm=forest:$F/bcast_$k.json;bcast_segment_size=$seg;max_segments=0")
  done
done
for launch in 1 2 3; do
  step forest16_l$launch 90 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast \
    --sizes 16M,64M --budget 0.4 --min-iterations 6 --seed $launch --quiet "${impls[@]}" \
    --json "$OUT/forest16-n16-l$launch.json"
done
tar czf $RES/o6.tgz -C /tmp o6
cat $OUT/steps.txt
