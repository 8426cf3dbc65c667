/* Answers questions about a bundle's header, one a line on stdin, for tests/test_bundle.py. Built as
 * C99 and as C++ against DIR/autotune_bundle.h (-I DIR). Each answer is one line on stdout:
 *
 *   gpu                       -> the bytes of AUTOTUNE_BUNDLE_GPU in hex
 *   find OP DTYPE M N K TRANS -> the index autotune_find returns, -1 for NULL
 *   launch I M N K SMS        -> rc grid(3) block(3) shared workspace counters of entry I at that shape
 *   args I M N K              -> count, then the arrays' order (a=1 b=2 out=3) and the sizes
 *   maps I M N K              -> count, then each map's fields
 */
#include <stdio.h>
#include <string.h>

#include "autotune_bundle.h"

int main(void) {
  char command[32], op[32], dtype[32];
  long long m, n, k;
  int index, trans, sms, i;
  while (scanf("%31s", command) == 1) {
    if (strcmp(command, "gpu") == 0) {
      const char *name = AUTOTUNE_BUNDLE_GPU;
      for (i = 0; name[i] != '\0'; ++i) printf("%02x", (unsigned)(unsigned char)name[i]);
      printf("\n");
    } else if (strcmp(command, "find") == 0 && scanf("%31s %31s %lld %lld %lld %d", op, dtype, &m, &n, &k, &trans) == 6) {
      const autotune_entry *e = autotune_find(op, dtype, m, n, k, trans);
      printf("%d\n", e ? e->index : -1);
    } else if (strcmp(command, "launch") == 0 && scanf("%d %lld %lld %lld %d", &index, &m, &n, &k, &sms) == 5) {
      autotune_launch l;
      int rc = autotune_launch_for(&autotune_entries[index], m, n, k, sms, &l);
      if (rc != 0) {
        printf("%d\n", rc);
        continue;
      }
      printf("%d %u %u %u %u %u %u %u %llu %llu\n", rc, (unsigned)l.grid[0], (unsigned)l.grid[1], (unsigned)l.grid[2],
             (unsigned)l.block[0], (unsigned)l.block[1], (unsigned)l.block[2], (unsigned)l.shared_bytes,
             (unsigned long long)l.workspace_floats, (unsigned long long)l.counters);
    } else if (strcmp(command, "args") == 0 && scanf("%d %lld %lld %lld", &index, &m, &n, &k) == 4) {
      autotune_args args;
      autotune_bind(&autotune_entries[index], &args, m, n, k, 1, 2, 3, 0.5f, 0.25f, 4, 5);
      printf("%d %llu %llu %llu", args.count, (unsigned long long)args.arrays[0], (unsigned long long)args.arrays[1],
             (unsigned long long)args.arrays[2]);
      for (i = 3; i < args.count - 4; ++i) printf(" %d", (int)*(const int32_t *)args.params[i]);
      printf(" %g %g %llu %llu\n", (double)*(const float *)args.params[args.count - 4],
             (double)*(const float *)args.params[args.count - 3],
             (unsigned long long)*(const uint64_t *)args.params[args.count - 2],
             (unsigned long long)*(const uint64_t *)args.params[args.count - 1]);
    } else if (strcmp(command, "maps") == 0 && scanf("%d %lld %lld %lld", &index, &m, &n, &k) == 4) {
      autotune_tensor_map maps[2];
      int count = autotune_tensor_maps(&autotune_entries[index], m, n, k, maps);
      printf("%d", count);
      for (i = 0; i < count; ++i) {
        printf(" %d %llu %llu %llu %u %u %d %d %d %d", maps[i].data_type, (unsigned long long)maps[i].dims[0],
               (unsigned long long)maps[i].dims[1], (unsigned long long)maps[i].stride_bytes, (unsigned)maps[i].box[0],
               (unsigned)maps[i].box[1], maps[i].interleave, maps[i].swizzle, maps[i].l2_promotion, maps[i].oob_fill);
      }
      printf("\n");
    } else {
      printf("bad query\n");
      return 2;
    }
  }
  return 0;
}
