/*
** engine/settings.c - the settings a statement changes (SET name = value)
** and shows (SHOW SETTINGS): one table, each entry with its range, its
** default, what it is for and what setting it does.  They are kept with
** the database (catalog settings).  The cost model's fitted weights are
** kept there too, by CALIBRATE (calibrate.c).
*/
#include "config.h"
#include "engine/engine_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int s_set_replication(te_engine *e, const char *name, long v, tr_err *err);
static int s_set_stored(te_engine *e, const char *name, long v, tr_err *err);
static int s_find(const char *name);

static int s_set_layout(te_engine *e, const char *name, long v, tr_err *err);

static const char *const s_synchronous[] = {"normal", "full", NULL};
static const char *const s_layouts[] = {"auto", "declared", NULL}; /* TO_LAYOUT_* order */

/* The settings, by name.  A number from lo to hi, or, where names is
** given, one of names[lo..hi] (kept in the catalog as the name; its value
** as a number is its index). */
static const struct {
  const char *name;         /* as SET writes it (lower case) */
  const char *const *names; /* the values' names, or NULL for a number */
  long lo, hi;              /* allowed values */
  long dflt;                /* value until SET */
  const char *help;         /* one line */
  int (*set)(te_engine *e, const char *name, long v, tr_err *err); /* stores it */
} s_settings[] = {
    {"layout", s_layouts, 0, 1, 0,
     "chunkings the optimizer chooses (auto) or the ones the tensors were declared with",
     s_set_layout},
    {"print_lines", NULL, 0, 1000000, 40,
     "lines of values PRINT shows before it summarises with '...' (0: every value)",
     s_set_stored},
    {"replication", NULL, 1, TC_MAX_REPLICAS, 2,
     "workers that hold every stored chunk (at most the number of workers)", s_set_replication},
    {"scheduler", td_sched_names, TD_SCHED_STATEMENT, TD_SCHED_MTOPO, TD_SCHED_MSCT,
     "what places a plan's chunk tasks within the workers' --memory when the optimizer's plan does not fit",
     s_set_stored},
    {"scheduler_lp_seconds", NULL, 0, 86400, 10,
     "seconds m-SCT's LP may take before m-ETF places the tasks (0: m-ETF always)", s_set_stored},
    {"synchronous", s_synchronous, 0, 1, 0,
     "where a statement's output is when it ends: its workers' memory (normal) or disks (full)",
     s_set_stored},
};
#define S_NSETTINGS (int)(sizeof s_settings / sizeof s_settings[0])

static int s_set_replication(te_engine *e, const char *name, long v, tr_err *err) {
  (void)name;
  return td_set_replication(e->cluster, (int)v, err);
}

static int s_set_layout(te_engine *e, const char *name, long v, tr_err *err) {
  int rc = s_set_stored(e, name, v, err);
  if (!rc) e->layout = v ? TO_LAYOUT_DECLARED : TO_LAYOUT_AUTO;
  return rc;
}

/* Setting i's value v as text, into buf. */
static void s_text(int i, long v, char *buf, size_t n) {
  if (s_settings[i].names) snprintf(buf, n, "%s", s_settings[i].names[v]);
  else snprintf(buf, n, "%ld", v);
}

/* The values setting i allows, as text, into buf. */
static void s_allowed(int i, char *buf, size_t n) {
  size_t o = 0;
  if (!s_settings[i].names) {
    snprintf(buf, n, "%ld to %ld", s_settings[i].lo, s_settings[i].hi);
    return;
  }
  buf[0] = '\0';
  for (long v = s_settings[i].lo; v <= s_settings[i].hi && o < n; v++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s", v > s_settings[i].lo ? " | " : "",
                          s_settings[i].names[v]);
}

/* Text as a value of setting i: TR_OK with *v, or -1. */
static int s_parse(int i, const char *text, long *v) {
  char *end;
  if (s_settings[i].names) {
    for (long k = s_settings[i].lo; k <= s_settings[i].hi; k++)
      if (!strcasecmp(text, s_settings[i].names[k])) {
        *v = k;
        return TR_OK;
      }
    return -1;
  }
  errno = 0;
  *v = strtol(text, &end, 10);
  return errno || *end || end == text || *v < s_settings[i].lo || *v > s_settings[i].hi ? -1 : TR_OK;
}

static int s_set_stored(te_engine *e, const char *name, long v, tr_err *err) {
  char value[32];
  int i = s_find(name);
  if (NEVER(i < 0)) return tr_seterr(err, TR_EINVAL, "unknown setting '%s'", name);
  s_text(i, v, value, sizeof value);
  return tc_setting_set(e->db, name, value, err);
}
static int s_find(const char *name) {
  for (int i = 0; i < S_NSETTINGS; i++)
    if (!strcmp(s_settings[i].name, name)) return i;
  return -1;
}

/* The names, comma-separated, into buf. */
static void s_names(char *buf, size_t n) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < S_NSETTINGS && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", s_settings[i].name);
}

long te_setting(te_engine *e, const char *name) {
  int i = s_find(name);
  char v[64];
  long x;
  if (NEVER(i < 0)) return 0;
  if (tc_setting_get(e->db, name, v, sizeof v, NULL) == TR_OK && s_parse(i, v, &x) == TR_OK) return x;
  return s_settings[i].dflt;
}

void te_setting_text(te_engine *e, const char *name, char *buf, size_t n) {
  int i = s_find(name);
  if (NEVER(i < 0)) {
    snprintf(buf, n, "?");
    return;
  }
  s_text(i, te_setting(e, name), buf, n);
}

int te_set(te_engine *e, const tp_stmt *s, tr_err *err) {
  int i = s_find(s->setting), k;
  char names[256];
  if (i < 0) {
    const char *cands[S_NSETTINGS];
    for (k = 0; k < S_NSETTINGS; k++) cands[k] = s_settings[k].name;
    s_names(names, sizeof names);
    k = tr_closest(s->setting, cands, S_NSETTINGS);
    return tr_at(err, s->name_pos,
                 tr_seterr(err, TR_ENAME, "unknown setting '%s' (%s%s%ssettings: %s)", s->setting,
                           k >= 0 ? "did you mean " : "", k >= 0 ? cands[k] : "",
                           k >= 0 ? "? " : "", names));
  }
  long v;
  if (s_parse(i, s->value, &v) != TR_OK) {
    s_allowed(i, names, sizeof names);
    return tr_at(err, s->value_pos,
                 tr_seterr(err, TR_EINVAL, "%s must be %s%s, not '%s'", s_settings[i].name,
                           s_settings[i].names ? "one of " : "an integer from ", names, s->value));
  }
  return s_settings[i].set(e, s_settings[i].name, v, err);
}

int te_show_settings(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"name", "value", "default", "allowed", "description"};
  te_result *r = te_rows_new(5, cols);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; i < S_NSETTINGS; i++) {
    char v[32], d[32], allowed[128];
    s_text(i, te_setting(e, s_settings[i].name), v, sizeof v);
    s_text(i, s_settings[i].dflt, d, sizeof d);
    s_allowed(i, allowed, sizeof allowed);
    const char *cells[] = {s_settings[i].name, v, d, allowed, s_settings[i].help};
    if (te_rows_add(r, cells)) {
      te_result_free(&r);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
  }
  *res = r;
  return TR_OK;
}

int te_settings_list(int i, const char **name, const char **help, char *allowed, size_t na,
                     char *dflt, size_t nd) {
  if (i < 0 || i >= S_NSETTINGS) return 0;
  *name = s_settings[i].name;
  *help = s_settings[i].help;
  s_allowed(i, allowed, na);
  s_text(i, s_settings[i].dflt, dflt, nd);
  return 1;
}

int te_settings_load(te_engine *e, tr_err *err) {
  (void)err;
  e->layout = te_setting(e, "layout") ? TO_LAYOUT_DECLARED : TO_LAYOUT_AUTO;
  return TR_OK;
}
