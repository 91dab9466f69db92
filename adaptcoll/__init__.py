"""adaptcoll: event-driven, segmented MPI collectives for mpi4py."""
