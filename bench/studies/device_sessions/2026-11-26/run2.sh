RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o2; mkdir -p $OUT
for launch in 3 4 5; do
  step osu16_mpich_l$launch 70 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu16_mpich_l$launch.json"
done
for launch in 2 3; do
step osu16_ompi_l$launch 70 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed $launch --quiet --impl native --impl adaptcoll \
    --json "$OUT/osu16_ompi_l$launch.json"
done
for l in 1 2; do for nz in quiet "100Hz x 250us"; do
  tag=$(echo "$nz" | tr -d ' ' | tr 'x' '_')
  args=(); [ "$nz" != quiet ] && args=(--noise "$nz")
  step noise16_${tag}_l$l 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 16M --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll "${args[@]}" \
    --json $OUT/noise16_${tag}-n16-l$l.json
done; done

tar czf $RES/o2.tgz -C /tmp o2
cat $OUT/steps.txt
