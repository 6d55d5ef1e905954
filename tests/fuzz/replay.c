/*
** tests/fuzz/replay.c - replays kept fuzz inputs without libFuzzer.
**
** Linked with one fuzz target (tests/fuzz/fuzz_*.c), it calls
** LLVMFuzzerTestOneInput() once per input: each argument is a file, or a
** directory whose regular files are all read (one level, no recursion
** below it).  A crash or sanitizer report fails the run; otherwise it
** prints "replayed N inputs" and exits 0.  Used by tests/fuzz/run_corpus.sh
** so that `make check` needs neither clang nor libFuzzer.
*/
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read a whole file and feed it to the target; returns 0 or -1. */
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  uint8_t *data = NULL;
  size_t n = 0, cap = 0;
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  for (;;) {
    size_t got;
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 4096;
      uint8_t *nd = realloc(data, ncap);
      if (!nd) {
        free(data);
        fclose(f);
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
      }
      data = nd;
      cap = ncap;
    }
    got = fread(data + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    free(data);
    fclose(f);
    fprintf(stderr, "replay: cannot read %s\n", path);
    return -1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data, n);
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  long count = 0;
  int i, failed = 0;
  for (i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "replay: cannot stat %s\n", argv[i]);
      failed = 1;
      continue;
    }
    if (S_ISDIR(sb.st_mode)) {
      DIR *d = opendir(argv[i]);
      struct dirent *de;
      if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", argv[i]);
        failed = 1;
        continue;
      }
      while ((de = readdir(d)) != NULL) {
        size_t len = strlen(argv[i]) + strlen(de->d_name) + 2;
        char *path = malloc(len);
        struct stat fs;
        if (!path) {
          failed = 1;
          break;
        }
        snprintf(path, len, "%s/%s", argv[i], de->d_name);
        if (stat(path, &fs) == 0 && S_ISREG(fs.st_mode)) {
          if (replay_file(path) == 0) count++;
          else failed = 1;
        }
        free(path);
      }
      closedir(d);
    } else if (S_ISREG(sb.st_mode)) {
      if (replay_file(argv[i]) == 0) count++;
      else failed = 1;
    }
  }
  printf("replayed %ld inputs\n", count);
  return failed ? 1 : 0;
}
