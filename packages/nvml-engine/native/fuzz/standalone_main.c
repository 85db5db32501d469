/*
 * Runs a libFuzzer target without libFuzzer: LLVMFuzzerInitialize once, then
 * LLVMFuzzerTestOneInput on each file named on the command line, in order. A broken
 * invariant traps (the process dies by a signal); a clean run prints one line
 *
 *   ok inputs=N
 *
 *   fuzz_<target>-replay FILE...   (exit 0 clean, 2 a file cannot be read)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL || fseek(f, 0, SEEK_END) != 0) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 2;
        }
        long len = ftell(f);
        uint8_t *data = malloc(len > 0 ? (size_t)len : 1);
        rewind(f);
        if (len < 0 || data == NULL || fread(data, 1, (size_t)len, f) != (size_t)len) {
            fprintf(stderr, "cannot read %s\n", argv[i]);
            return 2;
        }
        fclose(f);
        fprintf(stderr, "replay %s (%ld bytes)\n", argv[i], len);
        LLVMFuzzerTestOneInput(data, (size_t)len);
        free(data);
    }
    printf("ok inputs=%d\n", argc - 1);
    return 0;
}
