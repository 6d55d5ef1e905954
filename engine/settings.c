/*
** engine/settings.c - the settings a statement changes (SET name = value)
** and shows (SHOW SETTINGS): one table, each entry with its range, its
** default, what it is for and what setting it does.  They are kept with
** the database (catalog settings).
*/
#include "config.h"
#include "engine/engine_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int s_set_replication(te_engine *e, const char *name, long v, tr_err *err);
static int s_set_stored(te_engine *e, const char *name, long v, tr_err *err);

/* The settings, by name (they are integers). */
static const struct {
  const char *name; /* as SET writes it (lower case) */
  long lo, hi;      /* allowed values */
  long dflt;        /* value until SET */
  const char *help; /* one line */
  int (*set)(te_engine *e, const char *name, long v, tr_err *err); /* stores it */
} s_settings[] = {
    {"print_lines", 0, 1000000, 40,
     "lines of values PRINT shows before it summarises with '...' (0: every value)",
     s_set_stored},
    {"replication", 1, TC_MAX_REPLICAS, 2,
     "workers that hold every stored chunk (at most the number of workers)", s_set_replication},
};
#define S_NSETTINGS (int)(sizeof s_settings / sizeof s_settings[0])

static int s_set_replication(te_engine *e, const char *name, long v, tr_err *err) {
  (void)name;
  return td_set_replication(e->cluster, (int)v, err);
}

static int s_set_stored(te_engine *e, const char *name, long v, tr_err *err) {
  char value[32];
  snprintf(value, sizeof value, "%ld", v);
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
  char v[64], *end;
  if (NEVER(i < 0)) return 0;
  if (tc_setting_get(e->db, name, v, sizeof v, NULL) == TR_OK) {
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!errno && !*end && x >= s_settings[i].lo && x <= s_settings[i].hi) return x;
  }
  return s_settings[i].dflt;
}

int te_set(te_engine *e, const tp_stmt *s, tr_err *err) {
  int i = s_find(s->setting), k;
  char names[256], *end;
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
  errno = 0;
  long v = strtol(s->value, &end, 10);
  if (errno || *end || end == s->value || v < s_settings[i].lo || v > s_settings[i].hi)
    return tr_at(err, s->value_pos,
                 tr_seterr(err, TR_EINVAL, "%s must be an integer from %ld to %ld, not '%s'",
                           s_settings[i].name, s_settings[i].lo, s_settings[i].hi, s->value));
  return s_settings[i].set(e, s_settings[i].name, v, err);
}

int te_show_settings(te_engine *e, te_result **res, tr_err *err) {
  static const char *const cols[] = {"name", "value", "default", "allowed", "description"};
  te_result *r = te_rows_new(5, cols);
  if (!r) return tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; i < S_NSETTINGS; i++) {
    char v[32], d[32], allowed[64];
    snprintf(v, sizeof v, "%ld", te_setting(e, s_settings[i].name));
    snprintf(d, sizeof d, "%ld", s_settings[i].dflt);
    snprintf(allowed, sizeof allowed, "%ld to %ld", s_settings[i].lo, s_settings[i].hi);
    const char *cells[] = {s_settings[i].name, v, d, allowed, s_settings[i].help};
    if (te_rows_add(r, cells)) {
      te_result_free(&r);
      return tr_seterr(err, TR_ENOMEM, "out of memory");
    }
  }
  *res = r;
  return TR_OK;
}

int te_settings_list(int i, const char **name, const char **help, long *lo, long *hi, long *dflt) {
  if (i < 0 || i >= S_NSETTINGS) return 0;
  *name = s_settings[i].name;
  *help = s_settings[i].help;
  *lo = s_settings[i].lo;
  *hi = s_settings[i].hi;
  *dflt = s_settings[i].dflt;
  return 1;
}
