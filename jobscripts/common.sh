# shellcheck shell=bash
# Shared helpers for the adaptcoll job scripts: arguments, launcher, binding, dry run.
# Sourced by smoke.*, osu.* and noise.* (Slurm *.slurm and PBS *.pbs); not run on its own.

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
  MPIEXEC            mpiexec command (default mpiexec); MPIEXEC_BIND binding flags
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
    local -a bind
    if [[ "$LAUNCHER" == srun ]]; then
        read -r -a bind <<< "$SRUN_BIND"
        LAUNCH=(srun -n "$NP" "${bind[@]}")
    else
        read -r -a bind <<< "$MPIEXEC_BIND"
        LAUNCH=("$MPIEXEC" -n "$NP" "${bind[@]}")
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
# which imports mpi4py.MPI; the wrapper must never initialize MPI, the rank it runs does.
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
