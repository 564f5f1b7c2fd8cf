/* check_mem.c - unit tests of daemon/core/mem.c: size classes, reuse of freed
 * objects, blocks unmapped when empty, large objects from the heap. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem.h"

#define N 5000 /* objects of 100 bytes: several 64 KiB blocks */

static struct mem_usage usage(void)
{
    struct mem_usage u;

    mem_usage(&u);
    return u;
}

START_TEST(test_zeroed_aligned_and_apart)
{
    static char *p[N];
    struct mem_usage u0 = usage();

    for (int i = 0; i < N; i++) {
        p[i] = mem_alloc(100);
        ck_assert_ptr_nonnull(p[i]);
        ck_assert_uint_eq((uintptr_t)p[i] % 16, 0);
        for (int j = 0; j < 100; j++)
            ck_assert_int_eq(p[i][j], 0);
        memset(p[i], 0xA5, 100);
    }
    ck_assert_uint_eq(usage().objects, u0.objects + N);
    ck_assert_uint_ge(usage().blocks, u0.blocks + N * 112 / (64 * 1024));
    /* no two objects overlap: each still holds its own pattern after all were written */
    for (int i = 0; i < N; i++) {
        p[i][0] = (char)i;
        p[i][99] = (char)(i >> 8);
    }
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(p[i][0], (char)i);
        ck_assert_int_eq(p[i][99], (char)(i >> 8));
        ck_assert_int_eq(p[i][50], (char)0xA5);
    }
    for (int i = 0; i < N; i++)
        mem_free(p[i], 100);
    ck_assert_uint_eq(usage().objects, u0.objects);
}
END_TEST

START_TEST(test_freed_objects_are_reused_zeroed)
{
    char *a = mem_alloc(40), *b;

    memset(a, 0xFF, 40);
    mem_free(a, 40);
    b = mem_alloc(48); /* the same class of 48 bytes */
    ck_assert_ptr_eq(a, b);
    for (int j = 0; j < 48; j++)
        ck_assert_int_eq(b[j], 0);
    mem_free(b, 48);
}
END_TEST

START_TEST(test_empty_blocks_are_unmapped)
{
    static char *p[N];
    struct mem_usage u0 = usage(), full;

    for (int i = 0; i < N; i++)
        p[i] = mem_alloc(200);
    full = usage();
    ck_assert_uint_ge(full.blocks, u0.blocks + 10);
    /* freed in an order that empties blocks only at the end */
    for (int i = 0; i < N; i += 2)
        mem_free(p[i], 200);
    ck_assert_uint_eq(usage().blocks, full.blocks);
    for (int i = 1; i < N; i += 2)
        mem_free(p[i], 200);
    /* one empty block of the class is kept */
    ck_assert_uint_le(usage().blocks, u0.blocks + 1);
    ck_assert_uint_eq(usage().objects, u0.objects);
}
END_TEST

START_TEST(test_one_object_coming_and_going_maps_nothing)
{
    struct mem_usage u0;
    void *p = mem_alloc(300);

    mem_free(p, 300);
    u0 = usage();
    for (int i = 0; i < 1000; i++) {
        p = mem_alloc(300);
        mem_free(p, 300);
        ck_assert_uint_eq(usage().blocks, u0.blocks);
    }
}
END_TEST

START_TEST(test_sizes_and_large_objects)
{
    struct mem_usage u0 = usage();
    char *zero = mem_alloc(0), *small = mem_alloc(1), *max = mem_alloc(MEM_SMALL_MAX);
    char *large = mem_alloc(MEM_SMALL_MAX + 1);

    ck_assert_uint_eq(usage().objects, u0.objects + 3); /* the large one is the heap's */
    memset(max, 1, MEM_SMALL_MAX);
    for (int j = 0; j < MEM_SMALL_MAX + 1; j++)
        ck_assert_int_eq(large[j], 0);
    memset(large, 1, MEM_SMALL_MAX + 1);
    mem_free(zero, 0);
    mem_free(small, 1);
    mem_free(max, MEM_SMALL_MAX);
    mem_free(large, MEM_SMALL_MAX + 1);
    mem_free(NULL, 10);
    ck_assert_uint_eq(usage().objects, u0.objects);
    mem_trim();
}
END_TEST

static Suite *mem_suite(void)
{
    Suite *s = suite_create("mem");
    TCase *tc = tcase_create("slabs");

    tcase_add_test(tc, test_zeroed_aligned_and_apart);
    tcase_add_test(tc, test_freed_objects_are_reused_zeroed);
    tcase_add_test(tc, test_empty_blocks_are_unmapped);
    tcase_add_test(tc, test_one_object_coming_and_going_maps_nothing);
    tcase_add_test(tc, test_sizes_and_large_objects);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mem_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
