RES=$OUT
source <(sed -n "1,28p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o5; mkdir -p $OUT
for l in 1 2 3; do
  step ompi16_l$l 80 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast --sizes 2M,4M,8M,16M \
    --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll --json $OUT/ompi16-n16-l$l.json
  step mpich8_l$l 80 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c allreduce,reduce --sizes 4M,8M \
    --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll \
    --impl "adaptcoll:native_below=0;algorithm=pipeline;segment_size=512K;max_segments=0" --json $OUT/mpich8-n8-l$l.json
  step mpich16_l$l 80 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast --sizes 2M,4M,8M \
    --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll --json $OUT/mpich16-n16-l$l.json
done
tar czf $RES/o5.tgz -C /tmp o5
