RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/o4; mkdir -p $OUT
step special_tests 120 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -rs tests/test_backends.py tests/test_kernels.py
step gpu_kernels_check 60 python3 bench/gpu_kernels.py --ops all --dtypes all --sizes 1M,256M --check
step gpu_kernels_check_2 40 python3 bench/gpu_kernels.py --ops MAX,MIN,SUM --dtypes all --sizes 256M --check
step check_cupy_2ranks 60 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 -m adaptcoll.check --quick --device cupy \
    --json "$OUT/check_cupy_2ranks.json"
tar czf $RES/o4.tgz -C /tmp o4
cat $OUT/steps.txt; tail -3 $OUT/special_tests.txt; tail -2 $OUT/gpu_kernels_check*.txt
