/* NAS Parallel Benchmarks "EP" (Embarrassingly Parallel) kernel, written for Nightshift's
 * MPI stages from the NPB specification (Bailey et al., RNR-94-007, section 2.3): 2^(M+1)
 * uniform numbers from the NPB linear congruential generator (a = 5^13, seed 271828183,
 * modulus 2^46) become 2^M pairs; pairs inside the unit circle give Gaussian deviates
 * (Marsaglia's polar method) whose sums and annulus counts are checked against the
 * published verification values. Ranks split the batches of 2^16 pairs; OpenMP threads
 * split a rank's batches; MPI_Reduce combines. Prints one line per rank ("rank r of n on
 * <host>, t threads") and a verdict; exits 1 when verification fails.
 *   mpirun -n <ranks> ep [S|W|A|B]
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MK 16
#define NK (1 << MK)
#define NQ 10
#define MASK46 ((UINT64_C(1) << 46) - 1)
#define A_LCG UINT64_C(1220703125) /* 5^13 */
#define SEED UINT64_C(271828183)

/* Products wrap modulo 2^64, and 2^46 divides 2^64, so masking gives them modulo 2^46. */
static uint64_t mulmod46(uint64_t x, uint64_t y) { return (x * y) & MASK46; }

static uint64_t powmod46(uint64_t b, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r = mulmod46(r, b);
    b = mulmod46(b, b);
    e >>= 1;
  }
  return r;
}

struct klass { char name; int m; double sx, sy; };
/* Verification sums from the NPB reference implementation (ep.f, "verify"). */
static const struct klass CLASSES[] = {
  {'S', 24, -3.247834652034740e+3, -6.958407078382297e+3},
  {'W', 25, -2.863319731645753e+3, -6.320053679109499e+3},
  {'A', 28, -4.295875165629892e+3, -1.580732573678431e+4},
  {'B', 30, 4.033815542441498e+4, -2.660669192809235e+4},
};

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char want = argc > 1 ? argv[1][0] : 'S';
  const struct klass *k = NULL;
  for (size_t i = 0; i < sizeof CLASSES / sizeof *CLASSES; i++)
    if (CLASSES[i].name == want) k = &CLASSES[i];
  if (!k) {
    if (rank == 0) fprintf(stderr, "ep: unknown class '%c' (S, W, A or B)\n", want);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  printf("ep: rank %d of %d on %s, %d threads\n", rank, size, host, omp_get_max_threads());
  fflush(stdout);

  long batches = 1L << (k->m - MK);
  uint64_t per_batch = powmod46(A_LCG, 2 * (uint64_t)NK); /* a^(2NK): one batch's jump */
  double sx = 0, sy = 0, q[NQ] = {0};
  double t0 = MPI_Wtime();
#pragma omp parallel reduction(+ : sx, sy)
  {
    double lq[NQ] = {0};
#pragma omp for schedule(static)
    for (long b = rank; b < batches; b += size) {
      /* Random number n (1-based) of the whole run is SEED * a^n mod 2^46 / 2^46;
       * batch b uses numbers 2*NK*b+1 .. 2*NK*(b+1). */
      uint64_t x = mulmod46(SEED, powmod46(per_batch, (uint64_t)b));
      for (int i = 0; i < NK; i++) {
        x = mulmod46(x, A_LCG);
        double x1 = 2.0 * ldexp((double)x, -46) - 1.0;
        x = mulmod46(x, A_LCG);
        double x2 = 2.0 * ldexp((double)x, -46) - 1.0;
        double t = x1 * x1 + x2 * x2;
        if (t <= 1.0) {
          double f = sqrt(-2.0 * log(t) / t);
          double g1 = x1 * f, g2 = x2 * f;
          int l = (int)fmax(fabs(g1), fabs(g2));
          if (l < NQ) lq[l] += 1;
          sx += g1;
          sy += g2;
        }
      }
    }
#pragma omp critical
    for (int l = 0; l < NQ; l++) q[l] += lq[l];
  }
  double local[2 + NQ], total[2 + NQ];
  local[0] = sx;
  local[1] = sy;
  memcpy(local + 2, q, sizeof q);
  MPI_Reduce(local, total, 2 + NQ, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  double secs = MPI_Wtime() - t0;
  int ok = 1;
  if (rank == 0) {
    double ex = fabs((total[0] - k->sx) / k->sx), ey = fabs((total[1] - k->sy) / k->sy);
    ok = ex <= 1e-8 && ey <= 1e-8;
    double pairs = 0;
    for (int l = 0; l < NQ; l++) pairs += total[2 + l];
    printf("ep: class %c, %d ranks: sx=%.15e sy=%.15e gaussian pairs=%.0f\n", k->name, size,
           total[0], total[1], pairs);
    printf("ep: %.3f s, %.2f Mop/s total; verification %s\n", secs,
           ldexp(1.0, k->m + 1) / secs / 1e6, ok ? "SUCCESSFUL" : "FAILED");
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  return ok ? 0 : 1;
}
