/*
 * libFuzzer entry for the state parser: any input must either parse or yield an error
 * message, within the buffer it was given.
 *
 *   make fuzz && build/fuzz_state -max_len=1100000 CORPUS_DIR fuzz/seeds
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct state st;
    char err[STATE_ERR_LEN];
    if (state_parse((const char *)data, size, &st, err, sizeof(err)) != 0) {
        /* the message must be terminated inside its buffer */
        if (memchr(err, '\0', sizeof(err)) == NULL) {
            __builtin_trap();
        }
    } else if (st.gpu_count != st.system.device_count || st.gpu_count > STATE_MAX_GPUS) {
        __builtin_trap();
    }
    return 0;
}
