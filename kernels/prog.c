/*
** kernels/prog.c - the scalar programs of EinSums: validation and the
** scalar evaluator that reference kernels and tests use.
*/
#include "config.h"

#include <math.h>

#include "kernels/kernels.h"

/* Stack effect of an opcode: values popped, or -1 for an unknown opcode. */
static int s_pops(int op) {
  switch (op) {
  case TK_OP_INPUT:
  case TK_OP_CONST:
    return 0;
  case TK_OP_ADD:
  case TK_OP_SUB:
  case TK_OP_MUL:
  case TK_OP_DIV:
  case TK_OP_POW:
    return 2;
  case TK_OP_NEG:
  case TK_OP_RELU:
  case TK_OP_EXP:
  case TK_OP_LOG:
  case TK_OP_SQRT:
  case TK_OP_ABS:
  case TK_OP_TANH:
  case TK_OP_SIGMOID:
    return 1;
  default:
    return -1;
  }
}

int tk_prog_depth(const tk_prog *p) {
  int sp = 0, depth = 0;
  if (p->n < 1 || p->n > TK_MAX_PROG) return -1;
  for (int i = 0; i < p->n; i++) {
    const tk_insn *in = &p->code[i];
    int pops = s_pops(in->op);
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
  double st[TK_MAX_PROG];
  int sp = 0;
  for (int i = 0; i < p->n; i++) {
    const tk_insn *ins = &p->code[i];
    double a, b;
    switch (ins->op) {
    case TK_OP_INPUT: st[sp++] = in[ins->arg]; continue;
    case TK_OP_CONST: st[sp++] = ins->c; continue;
    case TK_OP_ADD: b = st[--sp]; st[sp - 1] += b; continue;
    case TK_OP_SUB: b = st[--sp]; st[sp - 1] -= b; continue;
    case TK_OP_MUL: b = st[--sp]; st[sp - 1] *= b; continue;
    case TK_OP_DIV: b = st[--sp]; st[sp - 1] /= b; continue;
    case TK_OP_POW: b = st[--sp]; st[sp - 1] = pow(st[sp - 1], b); continue;
    default: break;
    }
    a = st[sp - 1];
    switch (ins->op) {
    case TK_OP_NEG: a = -a; break;
    case TK_OP_RELU: a = a > 0 ? a : 0; break;
    case TK_OP_EXP: a = exp(a); break;
    case TK_OP_LOG: a = log(a); break;
    case TK_OP_SQRT: a = sqrt(a); break;
    case TK_OP_ABS: a = fabs(a); break;
    case TK_OP_TANH: a = tanh(a); break;
    default: a = 1 / (1 + exp(-a)); break; /* TK_OP_SIGMOID */
    }
    st[sp - 1] = a;
  }
  return st[0];
}
