RES=$OUT
source <(sed -n "1,28p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o4; mkdir -p $OUT
for l in 1 2 3; do
  step rule8_l$l 80 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c bcast,allreduce --sizes 1M,2M,4M \
    --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll --json $OUT/rule8-n8-l$l.json
done
for l in 2 3; do for n in 2 4; do
  step thr_${n}_l$l 80 "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 1M,2M,4M,8M --impl staged --impl "adaptcoll:device_native_below=0" \
    --budget 0.5 --min-iterations 5 --quiet --json $OUT/thr-n$n-l$l.json
done; done
tar czf $RES/o4.tgz -C /tmp o4
