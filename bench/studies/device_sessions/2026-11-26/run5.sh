# the two first-served sizes that read below 1.0 in one launch (8-rank Reduce 4M, Open MPI 16-rank Bcast 16M): 3 launches more
RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o5; mkdir -p $OUT
for launch in 1 2 3; do
  step rule8_reduce_l$launch 60 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c reduce \
    --sizes 2M,4M,8M --budget 1.0 --min-iterations 10 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/rule8_reduce-n8-l$launch.json"
  step rule16_ompi_bcast_l$launch 60 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast \
    --sizes 8M,16M,32M --budget 1.0 --min-iterations 10 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/rule16_ompi_bcast-n16-l$launch.json"
done
tar czf $RES/o5.tgz -C /tmp o5
cat $OUT/steps.txt
