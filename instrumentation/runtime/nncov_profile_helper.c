/* Profile-mode helper, linked into each library built with NNCOV_MODE=profile.
 *
 * The profile runtime (libclang_rt.profile) is linked statically into every
 * instrumented library with hidden visibility, so nothing outside the library can
 * reach its counters or make it write a profile. These wrappers have default
 * visibility and call the library's own copy; look them up with dlsym on the
 * library's handle (not RTLD_DEFAULT: every profile-mode library exports them).
 *
 * LLVM 19: counters are uint64, the counter bounds are char pointers.
 */
#define NNCOV_API __attribute__((visibility("default")))

struct __llvm_profile_data;

extern char *__llvm_profile_begin_counters(void);
extern char *__llvm_profile_end_counters(void);
extern const struct __llvm_profile_data *__llvm_profile_begin_data(void);
extern const struct __llvm_profile_data *__llvm_profile_end_data(void);
extern void __llvm_profile_reset_counters(void);
extern void __llvm_profile_set_filename(const char *name);
extern int __llvm_profile_write_file(void);

NNCOV_API char *nncov_profile_begin_counters(void) { return __llvm_profile_begin_counters(); }

NNCOV_API char *nncov_profile_end_counters(void) { return __llvm_profile_end_counters(); }

NNCOV_API const void *nncov_profile_begin_data(void) { return __llvm_profile_begin_data(); }

NNCOV_API const void *nncov_profile_end_data(void) { return __llvm_profile_end_data(); }

NNCOV_API void nncov_profile_reset(void) { __llvm_profile_reset_counters(); }

/* The runtime appends to an existing file and also writes at exit to the last name
 * set: delete the file before writing, and point the name at /dev/null afterwards. */
NNCOV_API void nncov_profile_set_filename(const char *name) { __llvm_profile_set_filename(name); }

NNCOV_API int nncov_profile_write_file(void) { return __llvm_profile_write_file(); }
