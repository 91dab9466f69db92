RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o3; mkdir -p $OUT
step osu_gpu_4ranks 100 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 64K,1M,16M,64M --impl adaptcoll --impl staged --budget 0.5 \
    --min-iterations 5 --quiet --json "$OUT/osu_gpu_4ranks.json"
step osu_gpu_2ranks 60 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 16M,64M,256M --impl adaptcoll --impl staged --budget 0.5 \
    --min-iterations 5 --quiet --json "$OUT/osu_gpu_2ranks.json"
for launch in 1 2; do
  step osu8_mpich_l$launch 60 "${MPICH[@]}" mpiexec -n 8 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu8_mpich_l$launch.json"
done
tar czf $RES/o3.tgz -C /tmp o3
cat $OUT/steps.txt
