! MPI_Allreduce from Fortran with libqccl_mpi.so preloaded, through one of Open MPI's three Fortran
! bindings (chosen at compile time): mpif.h, `use mpi` (QCCL_USE_MPI) or `use mpi_f08` (QCCL_F08).
! Open MPI's bindings call PMPI_Allreduce directly, so these calls are compressed only because the
! interposer defines the Fortran entry points too. The program checks that a large REAL sum, out of
! place and in place, is close to the exact sum, not MPI's own sum bit for bit (so it was
! compressed), and identical on every rank; the test around it checks the interposer's report.
program fortran_allreduce
#if defined(QCCL_F08)
  use mpi_f08
#elif defined(QCCL_USE_MPI)
  use mpi
#endif
  implicit none
#if !defined(QCCL_F08) && !defined(QCCL_USE_MPI)
  include 'mpif.h'
#endif
  integer, parameter :: n = 100000
  real, allocatable :: a(:), b(:), ref(:), plain(:)
  double precision, allocatable :: exact(:)
  double precision :: num, den
  integer :: ierr, rank, nranks, i, bad, allbad

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  allocate(a(n), b(n), ref(n), plain(n), exact(n))
  do i = 1, n
    a(i) = sin(0.001 * real(i) * real(rank + 1)) + 0.1 * real(rank)
    exact(i) = dble(a(i))
  end do
  ! Double precision is never compressed: the exact reference. PMPI_Allreduce is MPI's own REAL sum.
  call MPI_Allreduce(MPI_IN_PLACE, exact, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call PMPI_Allreduce(a, plain, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)

  bad = 0
  call MPI_Allreduce(a, b, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) bad = bad + 1
#if defined(QCCL_F08)
  ! ierror omitted: the binding passes no address for it.
  call MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD)
#else
  call MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (ierr /= MPI_SUCCESS) bad = bad + 1
#endif

  call check(b)
  call check(a)
  call MPI_Allreduce(bad, allbad, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    if (allbad == 0) then
      print '(a)', 'fortran_allreduce: PASS'
    else
      print '(a,i0,a)', 'fortran_allreduce: FAIL (', allbad, ' failed checks)'
    end if
  end if
  call MPI_Finalize(ierr)
  if (allbad /= 0) stop 1

contains

  ! Close to the exact sum (maxmin 8-bit), and the same bits on every rank as on rank 0.
  subroutine check(x)
    real, intent(in) :: x(:)
    num = sum((dble(x) - exact)**2)
    den = sum(exact**2)
    if (sqrt(num / den) > 0.01d0) then
      print '(a,i0,a,es10.3)', 'rank ', rank, ': relative error ', sqrt(num / den)
      bad = bad + 1
    end if
    if (all(x == plain)) then
      print '(a,i0,a)', 'rank ', rank, ': exactly MPI''s sum, so not compressed'
      bad = bad + 1
    end if
    ref = x
    call MPI_Bcast(ref, n, MPI_REAL, 0, MPI_COMM_WORLD, ierr)
    if (any(ref /= x)) then
      print '(a,i0,a)', 'rank ', rank, ': result differs from rank 0'
      bad = bad + 1
    end if
  end subroutine check
end program fortran_allreduce
