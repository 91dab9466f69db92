RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o8; mkdir -p $OUT
step gpu_tests_final 200 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_mpi.py tests/test_grouped_mpi.py \
  tests/test_grouped.py tests/test_device_small.py tests/test_device_routes.py tests/test_backends.py tests/test_kernels.py tests/test_staging.py
step check_cupy_4ranks_final 60 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 -m adaptcoll.check --quick --device cupy \
  --json $OUT/check_cupy_4ranks_final.json
for launch in 1 2 3; do
  step device_small_2ranks_l$launch 50 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/device_small.py \
    --sizes 4K,64K,1M --iters 300 --json "$OUT/device_small_2ranks_l$launch.json"
done
for n in 2 4; do
  step grouped_final_resnet50_${n}ranks 60 "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/grouped.py --device cupy \
    --set resnet50 --iters 20 --warmup 2 --impl per_array --impl packed --impl grouped --impl grouped_init \
    --impl grouped:multi_device_pack_below=4M --json "$OUT/grouped_final_resnet50_${n}ranks.json"
done
tar czf $RES/o8.tgz -C /tmp o8
