/*
** engine/calibrate.c - CALIBRATE, which fits the cost model's weights on
** the workers by least squares (Luo's thesis, chapter 10) and keeps them
** in the catalog, and their loading at open.
*/
#include "config.h"
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_WEIGHTS "cost_weights" /* the catalog setting holding fitted weights */
#define S_REPS 3                 /* timed runs of each probe, after S_WARM untimed */
#define S_WARM 2
#define S_PREFIX "_cal_"         /* the probes' tensors */
#define S_HELD 2                 /* a weight the prior moved this far off the plain fit is named */

int te_weights_load(te_engine *e, tr_err *err) {
  char v[512];
  tr_err e2;
  tl_weights_default(&e->w);
  if (tc_setting_get(e->db, S_WEIGHTS, v, sizeof v, NULL) != TR_OK) return TR_OK;
  if (tl_weights_parse(v, &e->w, &e2))
    return tr_seterr(err, TR_ECORRUPT, "the catalog's cost weights are damaged (%s): run CALIBRATE",
                     e2.msg);
  e->w.fitted = 1;
  return TR_OK;
}

/* ---- CALIBRATE ----------------------------------------------------------------- */

/* Run the CREATE and FILL statements of text (a probe's set-up). */
static int s_setup(te_engine *e, const char *text, tr_err *err) {
  int rc = TR_OK;
  while (*text && !rc) {
    size_t n = tp_statement_end(text);
    char *one = n ? strndup(text, n) : NULL;
    tp_stmt *s = NULL;
    if (!n) break;
    if (!one) return tr_seterr(err, TR_ENOMEM, "out of memory");
    if (!tp_is_blank(one) && !(rc = tp_parse(one, n, &s, err)))
      rc = s->kind == TP_ST_CREATE ? te_create(e, s, err)
           : s->kind == TP_ST_FILL ? te_fill(e, s, err)
                                   : tr_seterr(err, TR_EINVAL, "a probe sets up with CREATE and FILL");
    tp_stmt_free(&s);
    free(one);
    text += n;
  }
  return rc;
}

/* Drop every tensor of the probes; with `refuse`, fail instead when
** there is one (a user's tensor of that name is never touched). */
static int s_probe_tensors(te_engine *e, int refuse, tr_err *err) {
  tr_tensor *ts = NULL;
  int n = 0, rc = tc_tensor_list(e->db, &ts, &n, err);
  for (int i = 0; !rc && i < n; i++) {
    if (strncmp(ts[i].name, S_PREFIX, strlen(S_PREFIX))) continue;
    if (refuse)
      rc = tr_seterr(err, TR_EINVAL, "CALIBRATE makes its tensors as " S_PREFIX "*, and %s exists: "
                     "rename or drop it first", ts[i].name);
    else if ((rc = td_drop(e->cluster, ts[i].name, err)) == TR_OK)
      rc = tc_declared_chunk_set(e->db, ts[i].name, -1, NULL, err);
  }
  free(ts);
  return rc;
}

static int s_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Set up probe pr, run it once untimed and S_REPS times timed. */
static int s_probe(te_engine *e, const tl_probe *pr, tl_cost *c, double *t, tr_err *err) {
  tp_stmt *s = NULL;
  ta_plan *plan = calloc(1, sizeof *plan);
  int rc = plan ? s_setup(e, pr->setup, err) : tr_seterr(err, TR_ENOMEM, "out of memory");
  if (!rc) rc = tp_parse(pr->run, strlen(pr->run), &s, err);
  /* What the probes commit is CALIBRATE's own (its tensors, dropped at
  ** the end): a CALIBRATE that fails on a lost worker may run again. */
  int committed = e->committed;
  for (int r = 0; !rc && r < S_WARM + S_REPS; r++) {
    te_measure m;
    rc = ta_compile(e->db, NULL, NULL, 0, s, 0, plan, err);
    if (!rc) rc = te_run_plan(e, plan, NULL, NULL, &m, err);
    e->committed = committed;
    if (rc) break;
    if (r >= S_WARM) c[r - S_WARM] = m.cost, t[r - S_WARM] = m.elapsed_s;
  }
  tp_stmt_free(&s);
  free(plan);
  tr_err e2;
  int drc = s_probe_tensors(e, 0, &e2);
  return rc ? rc : drc ? (*err = e2, drc) : TR_OK;
}


/* The table CALIBRATE prints: per probe the median measured time and
** what the new weights predict, then the weights. */
static te_result *s_report(const tl_probe *pr, int np, const tl_cost *c, const double *t,
                           const tl_weights *w, const tl_weights *before,
                           const tl_fit_info *fit) {
  tr_text b = {0};
  tr_text_put(&b, "%-22s %-9s %12s %12s %7s\n", "probe", "varies", "measured_s", "predicted_s",
              "ratio");
  for (int i = 0; i < np; i++) {
    double ts[S_REPS], ps[S_REPS];
    for (int r = 0; r < S_REPS; r++) {
      ts[r] = t[i * S_REPS + r];
      ps[r] = tl_seconds(w, &c[i * S_REPS + r]);
    }
    qsort(ts, S_REPS, sizeof *ts, s_cmp_double);
    qsort(ps, S_REPS, sizeof *ps, s_cmp_double);
    tr_text_put(&b, "%-22s %-9s %12.4f %12.4f %7.2f\n", pr[i].name, tl_cost_name(pr[i].varies),
                ts[S_REPS / 2], ps[S_REPS / 2], ps[S_REPS / 2] / ts[S_REPS / 2]);
  }
  char wt[512];
  tl_weights_text(w, wt, sizeof wt);
  for (int k = 0; k < TL_NCOST; k++) {
    if (fit->kept >> k & 1)
      tr_text_put(&b, "'%s' moved in step with the components before it in these runs (on this "
                      "cluster they cannot tell it apart): it keeps its previous weight\n",
                  tl_cost_name(k));
    else if (before->w[k] > 0 &&
             !(fit->plain[k] > w->w[k] / S_HELD && fit->plain[k] < w->w[k] * S_HELD))
      tr_text_put(&b, "'%s': the probes alone put it at %g, too scattered to tell it from the "
                      "others; held near its previous weight %g\n",
                  tl_cost_name(k), fit->plain[k], before->w[k]);
  }
  tr_text_put(&b, "weights (seconds per unit, kept in the catalog): %s\n", wt);
  return te_text_result(tr_text_done(&b));
}

int te_calibrate(te_engine *e, te_result **res, tr_err *err) {
  int np;
  const tl_probe *pr = tl_probes(&np);
  tl_cost *c = calloc((size_t)np * S_REPS, sizeof *c);
  double *t = calloc((size_t)np * S_REPS, sizeof *t);
  tl_weights w = e->w, before = e->w;
  to_layout_mode saved = e->layout;
  int rc = c && t ? s_probe_tensors(e, 1, err) : tr_seterr(err, TR_ENOMEM, "out of memory");
  /* the probes run as written: their chunkings are what they measure */
  e->layout = TO_LAYOUT_DECLARED;
  for (int i = 0; !rc && i < np; i++) {
    rc = s_probe(e, &pr[i], &c[i * S_REPS], &t[i * S_REPS], err);
    if (rc) tr_prefix(err, rc, "CALIBRATE, probe %s", pr[i].name);
  }
  e->layout = saved;
  /* each probe counts once, at its median time: one slow run (a page
  ** fault storm, a neighbour's burst) must not pull a weight, and the fit
  ** weighs its prior against the probes' scatter, not their repeats */
  tl_cost *cm = rc ? NULL : calloc((size_t)np, sizeof *cm);
  double *tm = rc ? NULL : calloc((size_t)np, sizeof *tm);
  if (!rc && (!cm || !tm)) rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  for (int i = 0; !rc && i < np; i++) {
    double m[S_REPS];
    memcpy(m, &t[i * S_REPS], sizeof m);
    qsort(m, S_REPS, sizeof *m, s_cmp_double);
    cm[i] = c[i * S_REPS]; /* the same plan each run */
    tm[i] = m[S_REPS / 2];
  }
  tl_fit_info fit;
  if (!rc) rc = tl_weights_fit(np, cm, tm, &w, &fit, err);
  free(cm);
  free(tm);
  char text[512];
  tl_weights_text(&w, text, sizeof text);
  /* the weights change only once they are fitted and kept */
  if (!rc && !(rc = tc_setting_set(e->db, S_WEIGHTS, text, err))) {
    e->w = w;
    e->w.fitted = 1;
    if (res && !(*res = s_report(pr, np, c, t, &e->w, &before, &fit)))
      rc = tr_seterr(err, TR_ENOMEM, "out of memory");
  } else if (rc) {
    tr_prefix(err, rc, "CALIBRATE failed, the previous weights stay");
  }
  free(c);
  free(t);
  return rc;
}
