/*
** kernels/prog.c - the scalar programs of EinSums: the opcodes' names and
** stack effects (from kernels/opcodes.h), validation, and the scalar
** evaluator that reference kernels and tests use.
*/
#include "config.h"

#include <math.h>
#include <strings.h>

#include "kernels/kernels.h"

/* Each opcode's name and the values it pops. */
#define S_LEAF(NAME, name) [TK_OP_##NAME] = {name, 0},
#define S_BIN(NAME, name, expr) [TK_OP_##NAME] = {name, 2},
#define S_SEL(NAME, name, expr) [TK_OP_##NAME] = {name, 3},
#define S_UN(NAME, name, expr) [TK_OP_##NAME] = {name, 1},
static const struct {
  const char *name; /* as EXPLAIN writes it */
  int pops;         /* values popped; one is pushed */
} s_opcodes[TK_NOPCODES] = {TK_OPCODES(S_LEAF, S_BIN, S_SEL, S_UN)};
#undef S_LEAF
#undef S_BIN
#undef S_SEL
#undef S_UN

const char *tk_opcode_name(int op) {
  return op >= 0 && op < TK_NOPCODES ? s_opcodes[op].name : NULL;
}

int tk_opcode_pops(int op) {
  return op >= 0 && op < TK_NOPCODES ? s_opcodes[op].pops : -1;
}

int tk_opcode_function(const char *name) {
  for (int op = 0; op < TK_NOPCODES; op++)
    if ((s_opcodes[op].pops == 1 || s_opcodes[op].pops == 3) &&
        !strcasecmp(name, s_opcodes[op].name))
      return op;
  return -1;
}

int tk_prog_depth(const tk_prog *p) {
  int sp = 0, depth = 0;
  if (p->n < 1 || p->n > TK_MAX_PROG) return -1;
  for (int i = 0; i < p->n; i++) {
    const tk_insn *in = &p->code[i];
    int pops = tk_opcode_pops(in->op);
    if (pops < 0 || sp < pops) return -1;
    if (in->op == TK_OP_INPUT && (in->arg < 0 || in->arg >= TK_MAX_INPUTS))
      return -1;
    sp += 1 - pops; /* every opcode pushes exactly one value */
    if (sp > depth) depth = sp;
  }
  return sp == 1 ? depth : -1;
}

/* p must be valid (tk_prog_depth(p) >= 0). */
double tk_prog_eval(const tk_prog *p, const double *in) {
  TK_PROG_EVAL_BODY(double, *p, in)
}
