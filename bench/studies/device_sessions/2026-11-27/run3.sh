#!/usr/bin/env bash
# Device session of 2026-11-27, third call (issues 35 and 36): after the package moved into layer folders
# and the compiled progress path landed. GPU tests again (the moved modules on a GPU), whether the
# compiled path builds there, its per-message cost at 2 ranks (bench/engine_cost.py), and 16 ranks with
# the compiled engine against native MPI and the Python engine (served at every size), MPICH x2 and
# Open MPI x1. Output tarred into $OUT.
RES=$OUT
source <(sed -n "1,/^}/p" bench/device_session.sh) x >/dev/null 2>&1
export OUT=/tmp/d3; mkdir -p $OUT
{ cc --version | head -1; "${MPICH[@]}" mpicc -show; } >"$OUT/cc.txt" 2>&1
step build 120 "${MPICH[@]}" python3 -c "from mpi4py import MPI; from adaptcoll.runtime import compiled; print(compiled.status())"
step build_ompi 120 "${OMPI[@]}" python3 -c "from mpi4py import MPI; from adaptcoll.runtime import compiled; print(compiled.status())"
step gpu_tests 150 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -rs tests/test_gpu_mpi.py tests/test_backends.py \
  tests/test_kernels.py tests/test_device_routes.py tests/test_staging.py tests/test_cuda_detect.py tests/test_device_small.py
step engine_cost_mpich 60 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/engine_cost.py --mpi --repeats 9
step engine_cost_ompi 60 "${OMPI[@]}" mpiexec -n 2 --bind-to core python3 bench/engine_cost.py --mpi --repeats 9
IMPLS=(--impl native --impl adaptcoll --impl "adaptcoll:native_below=0" --impl "adaptcoll:native_below=0;engine=python"
       --impl "adaptcoll:native_below=0;segment_size=128K;max_segments=0")
for launch in 1 2; do
  step osu16_compiled_mpich_l$launch 80 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py \
    -c bcast,reduce,allreduce --sizes 256K,1M,4M,16M --budget 0.3 --min-iterations 5 --seed $launch --quiet \
    "${IMPLS[@]}" --json "$OUT/osu16_compiled_mpich_l$launch.json"
done
step osu16_compiled_ompi_l1 80 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py \
  -c bcast,reduce,allreduce --sizes 256K,1M,4M,16M --budget 0.3 --min-iterations 5 --seed 1 --quiet \
  "${IMPLS[@]}" --json "$OUT/osu16_compiled_ompi_l1.json"
step check_quick_16ranks 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 -m adaptcoll.check --quick \
  --json "$OUT/check_quick_16ranks.json"
tar czf $RES/d3.tgz -C /tmp d3
cat $OUT/steps.txt
