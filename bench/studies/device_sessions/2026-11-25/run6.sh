RES=$OUT
source <(sed -n "1,28p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o6; mkdir -p $OUT
for l in 1 2; do for nz in quiet "100Hz x 250us" "1kHz x 25us"; do
  tag=$(echo "$nz" | tr -d ' ' | tr 'x' '_')
  args=(); [ "$nz" != quiet ] && args=(--noise "$nz")
  step noise16_${tag}_l$l 90 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 4M,16M --budget 1.0 --min-iterations 10 --seed $l --quiet --impl native --impl adaptcoll "${args[@]}" \
    --json $OUT/noise16_${tag}-n16-l$l.json
done; done
tar czf $RES/o6.tgz -C /tmp o6
