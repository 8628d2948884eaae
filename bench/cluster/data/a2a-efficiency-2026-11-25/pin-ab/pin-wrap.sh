#!/usr/bin/env bash
# Pins this rank to one core by PIN_MODE: mod (rank % 2) or div (rank / 2); none leaves it.
r=${OMPI_COMM_WORLD_RANK:-0}
case "${PIN_MODE:-none}" in
  mod) exec taskset -c $((r % 2)) "$@" ;;
  div) exec taskset -c $((r / 2)) "$@" ;;
  *) exec "$@" ;;
esac
