# shellcheck shell=bash
# Shared helpers for the adaptcoll job scripts: arguments, launcher, binding, dry run.
# Sourced by smoke.*, tune.*, osu.* and noise.* (Slurm *.slurm and PBS *.pbs); not run on its own.

# Repository root: ADAPTCOLL_ROOT, else the submit directory, else this file's parent folder.
adaptcoll_root() {
    if [[ -n "${ADAPTCOLL_ROOT:-}" ]]; then
        printf '%s\n' "$ADAPTCOLL_ROOT"
    elif [[ -f "${BASH_SOURCE[0]%/*}/../pyproject.toml" ]]; then
        (cd "${BASH_SOURCE[0]%/*}/.." && pwd)
    else
        printf '%s\n' "${SLURM_SUBMIT_DIR:-${PBS_O_WORKDIR:-$PWD}}"
    fi
}

usage_common() {
    cat <<'USAGE'
Common arguments (any order):
  --dry-run          print the commands instead of running them (also DRY_RUN=1)
  KEY=VALUE          set a parameter (same as exporting it), e.g. NP=64 RESULTS=out
Common parameters:
  NP                 MPI ranks (default: SLURM_NTASKS, lines of PBS_NODEFILE, else 2)
  LAUNCHER           srun | mpiexec (default: srun inside a Slurm job, else mpiexec)
  MPIEXEC            mpiexec command, split on spaces (default mpiexec); MPIEXEC_BIND binding flags
                     (default "--bind-to core", accepted by Open MPI and MPICH/Hydra)
  SRUN_BIND          srun binding flag (default --cpu-bind=cores)
  PYTHON             Python of the environment with mpi4py + adaptcoll (default python3)
  RESULTS            output folder (default results/<job id or date>)
USAGE
}

# parse_common "$@": handles --dry-run, --help and KEY=VALUE; anything else is an error.
parse_common() {
    local arg
    for arg in "$@"; do
        case "$arg" in
            --dry-run) DRY_RUN=1 ;;
            -h|--help) usage; exit 0 ;;
            [A-Z_]*=*) export "${arg?}" ;;
            *) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
        esac
    done
    DRY_RUN=${DRY_RUN:-0}
    PYTHON=${PYTHON:-python3}
    if [[ -z "${NP:-}" ]]; then
        if [[ -n "${SLURM_NTASKS:-}" ]]; then
            NP=$SLURM_NTASKS
        elif [[ -n "${PBS_NODEFILE:-}" && -r "${PBS_NODEFILE}" ]]; then
            NP=$(wc -l < "$PBS_NODEFILE")
        else
            NP=2
        fi
    fi
    if [[ -z "${LAUNCHER:-}" ]]; then
        if [[ -n "${SLURM_JOB_ID:-}" ]]; then LAUNCHER=srun; else LAUNCHER=mpiexec; fi
    fi
    MPIEXEC=${MPIEXEC:-mpiexec}
    MPIEXEC_BIND=${MPIEXEC_BIND:---bind-to core}
    SRUN_BIND=${SRUN_BIND:---cpu-bind=cores}
    RESULTS=${RESULTS:-results/${SLURM_JOB_ID:-${PBS_JOBID:-$(date +%Y%m%d-%H%M%S)}}}
}

# launch_prefix: the launcher words for NP ranks, one per array element, into LAUNCH.
launch_prefix() {
    local -a bind mpiexec
    if [[ "$LAUNCHER" == srun ]]; then
        read -r -a bind <<< "$SRUN_BIND"
        LAUNCH=(srun -n "$NP" "${bind[@]}")
    else
        read -r -a bind <<< "$MPIEXEC_BIND"
        read -r -a mpiexec <<< "$MPIEXEC"
        LAUNCH=("${mpiexec[@]}" -n "$NP" "${bind[@]}")
    fi
}

# run OUTFILE CMD...: print the command (dry run) or run it, tee-ing its output to OUTFILE ("-" = none).
run() {
    local out=$1
    shift
    if [[ "$DRY_RUN" == 1 ]]; then
        printf '%q ' "$@"
        if [[ "$out" != - ]]; then printf '> %q' "$out"; fi
        printf '\n'
        return 0
    fi
    echo "+ $*" >&2
    if [[ "$out" == - ]]; then
        "$@"
    else
        mkdir -p "$(dirname "$out")"
        "$@" 2>&1 | tee "$out"
        return "${PIPESTATUS[0]}"
    fi
}

# The noise wrapper (python -m adaptcoll.noise run): loads adaptcoll.noise without adaptcoll/__init__.py,
# so the wrapper imports nothing else (importing adaptcoll would not initialize MPI either; the rank
# the wrapper runs does).
# Keep in sync with adaptcoll.noise.__main__.SAFE_PYTHON_C (tests/test_jobscripts.py checks it).
noise_wrap() {
    NOISE_WRAP=("$PYTHON" -c "import importlib.util, sys, types; spec = importlib.util.find_spec('adaptcoll'); pkg = types.ModuleType('adaptcoll'); pkg.__path__ = list(spec.submodule_search_locations); sys.modules['adaptcoll'] = pkg; from adaptcoll.noise.__main__ import main; raise SystemExit(main())" run)
}

# Record where and with what the job ran (skipped in a dry run).
describe_job() {
    [[ "$DRY_RUN" == 1 ]] && return 0
    mkdir -p "$RESULTS"
    {
        echo "date: $(date -Is)"
        echo "host: $(hostname)"
        echo "job: ${SLURM_JOB_ID:-${PBS_JOBID:-none}} nodes: ${SLURM_JOB_NODELIST:-${PBS_NODEFILE:-local}}"
        echo "NP=$NP LAUNCHER=$LAUNCHER"
        "$PYTHON" -c 'import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print("mpi4py", mpi4py.__version__); print(MPI.Get_library_version().strip())' 2>&1 || true
    } > "$RESULTS/job-info.txt"
}

# ---- job bodies --------------------------------------------------------------------------------

# Correctness and speed on NP ranks: python -m adaptcoll.check (CHECK_MODE=full by default: every algorithm,
# form, type and op against native MPI, then the speed comparison). Exit status 1 when a case fails.
# SMOKE_PYTEST=1 adds pytest -k mpi.
job_smoke() {
    local root
    local -a extra
    root=$(adaptcoll_root)
    case "${CHECK_MODE:=full}" in
        full|quick) ;;
        *) echo "CHECK_MODE=$CHECK_MODE: expected full or quick" >&2; return 2 ;;
    esac
    read -r -a extra <<< "${CHECK_EXTRA:-}"
    launch_prefix
    describe_job
    run "$RESULTS/check.txt" "${LAUNCH[@]}" "$PYTHON" -m adaptcoll.check "--$CHECK_MODE" \
        --json "$RESULTS/check.json" "${extra[@]}" || return
    if [[ "${SMOKE_PYTEST:-0}" == 1 ]]; then
        # pytest-isolate-mpi starts its own mpiexec per test, so pytest itself runs outside the launcher;
        # "-o addopts=": in one process (pyproject's "-n 2" wants pytest-xdist, which a cluster may lack).
        run "$RESULTS/pytest-mpi.txt" "$PYTHON" -m pytest "$root/tests" -k mpi -p no:cacheprovider -o addopts=
    fi
}

# The table's default place: adaptcoll's cache directory ($XDG_CACHE_HOME/adaptcoll, else
# ~/.cache/adaptcoll: adaptcoll/tune/files.py), one file per cluster (Slurm's cluster name, the PBS
# server in the job id, else "cluster"), which each tune job of another shape merges into.
tuning_default() {
    local name=${TUNING_NAME:-}
    if [[ -z "$name" ]]; then
        name=${SLURM_CLUSTER_NAME:-}
        [[ -z "$name" && "${PBS_JOBID:-}" == *.* ]] && name=${PBS_JOBID#*.}
        name=${name%%.*}
        name=${name:-cluster}
    fi
    local cache=${XDG_CACHE_HOME:-}
    [[ -n "$cache" ]] || cache=$HOME/.cache
    printf '%s/adaptcoll/tuning-%s.json\n' "$cache" "${name//[^A-Za-z0-9_-]/-}"
}

usage_tune() {
    cat <<'USAGE'
  TUNING_OUT         the table (merged with what it holds; default $XDG_CACHE_HOME/adaptcoll/tuning-NAME.json,
                     else ~/.cache/adaptcoll/...: must be readable where later jobs run their rank 0)
  TUNING_NAME        NAME in that default (default: Slurm's cluster name, the PBS server, else 'cluster');
                     one table per MPI library: tuning with another MPI replaces the file's entries
  TUNE_SIZES         --sizes (default 4K..64M); TUNE_COLLS --collectives (default all five, comma-separated)
  TUNE_BUDGET        --budget SECONDS (default 60 per collective); TUNE_EXTRA more adaptcoll.tune flags
USAGE
}

# Tuning table: python -m adaptcoll.tune on NP ranks with the job's binding, written (merged) to
# TUNING_OUT, then printed with 'tune show'; ends with the export line later jobs use.
job_tune() {
    local line
    local -a args extra
    TUNING_OUT=${TUNING_OUT:-$(tuning_default)}
    TUNING_OUT=${TUNING_OUT/#\~/$HOME}
    [[ "$TUNING_OUT" == /* ]] || TUNING_OUT=$PWD/$TUNING_OUT  # later jobs start elsewhere
    args=(-o "$TUNING_OUT")
    [[ -n "${TUNE_SIZES:-}" ]] && args+=(--sizes "$TUNE_SIZES")
    [[ -n "${TUNE_COLLS:-}" ]] && args+=(--collectives "$TUNE_COLLS")
    [[ -n "${TUNE_BUDGET:-}" ]] && args+=(--budget "$TUNE_BUDGET")
    read -r -a extra <<< "${TUNE_EXTRA:-}"
    launch_prefix
    describe_job
    run "$RESULTS/tune.txt" "${LAUNCH[@]}" "$PYTHON" -m adaptcoll.tune "${args[@]}" "${extra[@]}" || return
    run "$RESULTS/tune-show.txt" "$PYTHON" -m adaptcoll.tune show "$TUNING_OUT" || return
    line="export ADAPTCOLL_TUNING=$(printf '%q' "$TUNING_OUT")"
    [[ "$DRY_RUN" == 1 ]] || printf '%s\n' "$line" > "$RESULTS/tuning.env"
    echo "# later jobs on this cluster with this MPI use the table with:" >&2
    printf '%s\n' "$line"
}

# osu_args: the OSU flags shared by the sweep and the noise grid, into OSU_ARGS.
osu_args() {
    local impl
    OSU_ARGS=(-m "${SIZES:-1:4M}")
    [[ -n "${ITERS:-}" ]] && OSU_ARGS+=(-i "$ITERS")
    [[ -n "${WARMUP:-}" ]] && OSU_ARGS+=(-x "$WARMUP")
    [[ "${FULL:-1}" == 1 ]] && OSU_ARGS+=(-f)
    for impl in ${IMPLS:-native adaptcoll}; do
        OSU_ARGS+=(--impl "$impl")
    done
    read -r -a extra <<< "${OSU_EXTRA:-}"
    OSU_ARGS+=("${extra[@]}")
}

# OSU-style sweep: one launch per collective, native and adaptcoll side by side in the same launch.
job_osu() {
    local root coll
    root=$(adaptcoll_root)
    launch_prefix
    osu_args
    describe_job
    for coll in ${COLLS:-bcast reduce allreduce}; do
        run "$RESULTS/osu-$coll.txt" "${LAUNCH[@]}" "$PYTHON" "$root/bench/osu.py" -c "$coll" "${OSU_ARGS[@]}" \
            --json "$RESULTS/osu-$coll.json" || return
    done
}

# Noise grid: the 2.5% patterns of Ferreira et al. (and a noise-free baseline) for every collective.
# NOISE_MODE=flag passes the spec to bench/osu.py --noise (detours around each size, stats in the JSON);
# NOISE_MODE=wrap runs every rank under the adaptcoll.noise wrapper (detours for the whole launch).
job_noise() {
    local root coll spec tag full
    local -a grid
    root=$(adaptcoll_root)
    launch_prefix
    osu_args
    noise_wrap
    describe_job
    IFS=';' read -r -a grid <<< "${GRID:-off;10Hz x 2.5ms;100Hz x 250us;1kHz x 25us}"
    for coll in ${COLLS:-bcast reduce allreduce}; do
        for spec in "${grid[@]}"; do
            spec=$(echo "$spec" | sed 's/^ *//; s/ *$//')
            tag=$(echo "$spec" | tr -c 'A-Za-z0-9.\n' '_')
            full="$spec"
            [[ "$spec" != off ]] && full="$spec, ${PATTERN:-poisson}, seed=${SEED:-0}"
            if [[ "${NOISE_MODE:-flag}" == wrap ]]; then
                run "$RESULTS/noise-$coll-$tag.txt" "${LAUNCH[@]}" "${NOISE_WRAP[@]}" --spec "$full" -- \
                    "$PYTHON" "$root/bench/osu.py" -c "$coll" "${OSU_ARGS[@]}" --seed "${SEED:-0}" \
                    --json "$RESULTS/noise-$coll-$tag.json" || return
            else
                local -a noise_flag=()
                [[ "$spec" != off ]] && noise_flag=(--noise "$full" --noise-ranks "${NOISE_RANKS:-all}")
                run "$RESULTS/noise-$coll-$tag.txt" "${LAUNCH[@]}" "$PYTHON" "$root/bench/osu.py" -c "$coll" \
                    "${OSU_ARGS[@]}" "${noise_flag[@]}" --seed "${SEED:-0}" \
                    --json "$RESULTS/noise-$coll-$tag.json" || return
            fi
        done
    done
}
