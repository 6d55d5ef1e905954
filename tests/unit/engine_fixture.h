/*
** tests/unit/engine_fixture.h - the fixture of the unit tests that run
** statements through te_exec (test_engine.c, test_fusion.c): an engine on
** a transient database with two local workers, opened before each test
** and closed after it.  Header-only, for test programs of one source file.
**
**   TestSuite(engine, .init = tf_engine_open, .fini = tf_engine_close);
*/
#ifndef TRADB_TEST_ENGINE_FIXTURE_H
#define TRADB_TEST_ENGINE_FIXTURE_H

#include <criterion/criterion.h>
#include <stdlib.h>

#include "engine/engine.h"

/* The running test's engine. */
static te_engine *tf_e;

static inline void tf_engine_open(void) {
  tr_err err;
  /* The engine starts local workers: they are the tradb binary. */
  te_config cfg = {.threads = 1, .local_workers = 2, .self_exe = getenv("TRADB")};
  cr_assert_not_null(cfg.self_exe, "TRADB must name the tradb binary");
  cr_assert_eq(te_open(&cfg, &tf_e, &err), TR_OK, "%s", err.msg);
}

static inline void tf_engine_close(void) { te_close(&tf_e); }

#endif /* TRADB_TEST_ENGINE_FIXTURE_H */
