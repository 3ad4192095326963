/* An installed-libkjit consumer in C: compile a templated kernel into a cache folder given on
   the command line, resolve its name, and check a bad call's status and message.
   Usage: consumer_c CACHE_DIR. Prints the kernel name; exits non-zero on any failure. */
#include <kjit/kjit.h>

#include <stdio.h>
#include <string.h>

static const char *source = "template <int N> __global__ void scale(float *p) { p[threadIdx.x] *= N; }\n";

int main(int argc, char **argv) {
    kjit_compile_options opts = KJIT_COMPILE_OPTIONS_INIT;
    char cubin[4096], name[512];
    kjit_status st;
    if (argc != 2) {
        fprintf(stderr, "usage: consumer_c CACHE_DIR\n");
        return 2;
    }
    if (kjit_version() != KJIT_VERSION_NUMBER) {
        fprintf(stderr, "header version %d, library %u\n", KJIT_VERSION_NUMBER, kjit_version());
        return 1;
    }
    opts.cache_dir = argv[1];
    opts.arch = "sm_90";
    opts.name_expression = "scale<3>";
    st = kjit_compile(source, "scale", &opts, cubin, sizeof cubin, NULL);
    if (st == KJIT_OK) st = kjit_resolve_name(cubin, "scale", name, sizeof name, NULL);
    if (st != KJIT_OK) {
        fprintf(stderr, "%s: %s\n", kjit_status_string(st), kjit_last_error());
        return 1;
    }
    if (strcmp(name, "_Z5scaleILi3EEvPf") != 0) {
        fprintf(stderr, "unexpected name %s\n", name);
        return 1;
    }
    st = kjit_resolve_name("/nonexistent/x.cubin", "scale", name, sizeof name, NULL);
    if (st == KJIT_OK || strstr(kjit_last_error(), "/nonexistent/x.cubin") == NULL) {
        fprintf(stderr, "a missing cubin gave %s: %s\n", kjit_status_string(st), kjit_last_error());
        return 1;
    }
    printf("C consumer: libkjit %s, %s -> %s\n", kjit_version_string(), cubin, "_Z5scaleILi3EEvPf");
    return 0;
}
