RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o9; mkdir -p $OUT
step grouped_tests 200 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -rs tests/test_kernels.py tests/test_grouped.py \
  tests/test_grouped_mpi.py tests/test_device_routes.py tests/test_gpu_mpi.py tests/test_device_small.py
for n in 2 4; do for set in latency_1000 resnet50; do
  step grouped_batch_${set}_${n}ranks 90 "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/grouped.py --device cupy \
    --set $set --iters 20 --warmup 3 --impl per_array --impl packed --impl grouped --impl grouped_init \
    --json "$OUT/grouped_batch_${set}_${n}ranks.json"
done; done
tar czf $RES/o9.tgz -C /tmp o9
