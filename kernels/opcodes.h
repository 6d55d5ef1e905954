/*
** kernels/opcodes.h - the opcodes of scalar programs (tk_prog), listed
** once, as Lua's lopcodes.h lists its VM's.  Everything that knows an
** opcode is an expansion of TK_OPCODES: the tk_opcode enum and TK_NOPCODES
** (kernels.h), the names and stack effects that validation and EXPLAIN use
** (kernels/prog.c), and every evaluator: the scalar one of the reference
** kernels and of the CUDA kernel (TK_PROG_EVAL_BODY below) and the block
** interpreter of kernels/fast.c.  An opcode added to the list gets a case
** in each of them; a value that is not in the list fails validation
** (tk_prog_depth) and is never evaluated as anything.
**
** TK_OPCODES(LEAF, BIN, SEL, UN) names each opcode in enum order (the
** engine relies on it: the binary operators are TK_OP_ADD..TK_OP_NE, the
** unary functions start at TK_OP_NEG):
**
**   LEAF(NAME, name)       TK_OP_<NAME> pushes a value: an input's element
**                          (TK_OP_INPUT, input `arg`) or a constant
**                          (TK_OP_CONST, `c`)
**   BIN(NAME, name, expr)  pops b, then a, and pushes expr
**   SEL(NAME, name, expr)  pops c, then b, then a, and pushes expr (a
**                          function of three arguments: where)
**   UN(NAME, name, expr)   replaces the top of the stack, a, by expr
**
** name is how EXPLAIN writes the opcode and how a statement spells a
** function (`where(c, a, b)` and the unary ones).  expr, of a, b and c,
** serves every element type as written: in C with <math.h> (double) or
** <tgmath.h> (float and double, kernels/fast.c), in CUDA C++ with its
** float overloads; a literal 0 or 1 takes the type of the result it is
** stored in, so a comparison gives 1 or 0 in the statement's type.  This
** header is also compiled as C++ (nvcc).
*/
#ifndef TRADB_OPCODES_H
#define TRADB_OPCODES_H

#define TK_OPCODES(LEAF, BIN, SEL, UN)                                        \
  LEAF(INPUT, "input")                                                        \
  LEAF(CONST, "const")                                                        \
  BIN(ADD, "+", a + b)                                                        \
  BIN(SUB, "-", a - b)                                                        \
  BIN(MUL, "*", a * b)                                                        \
  BIN(DIV, "/", a / b)                                                        \
  BIN(POW, "^", pow(a, b))                                                    \
  BIN(LT, "<", a < b ? 1 : 0)                                                 \
  BIN(LE, "<=", a <= b ? 1 : 0)                                               \
  BIN(GT, ">", a > b ? 1 : 0)                                                 \
  BIN(GE, ">=", a >= b ? 1 : 0)                                               \
  BIN(EQ, "==", a == b ? 1 : 0)                                               \
  BIN(NE, "!=", a != b ? 1 : 0)                                               \
  SEL(WHERE, "where", a != 0 ? b : c)                                         \
  UN(NEG, "neg", -a)                                                          \
  UN(RELU, "relu", a > 0 ? a : 0)                                             \
  UN(EXP, "exp", exp(a))                                                      \
  UN(LOG, "log", log(a))                                                      \
  UN(SQRT, "sqrt", sqrt(a))                                                   \
  UN(ABS, "abs", fabs(a))                                                     \
  UN(TANH, "tanh", tanh(a))                                                   \
  UN(SIGMOID, "sigmoid", 1 / (1 + exp(-a)))                                   \
  UN(STEP, "step", a > 0 ? 1 : 0)

/* Helpers for expansions: TK_OPCODE_NONE drops an entry, TK_OPCODE_CASE
** makes it a case label (a list of them selects a kind of opcode). */
#define TK_OPCODE_NONE(...)
#define TK_OPCODE_CASE(NAME, ...) case TK_OP_##NAME:

/*
** The body of a scalar evaluator of programs, for a function of type T
** whose program is the lvalue P (a tk_prog) and whose inputs are IN (an
** array of T): kernels/prog.c's tk_prog_eval (double) and the CUDA
** kernel's (float and double) are both this body.  P must be valid
** (tk_prog_depth(&P) >= 0, which every kernel checks before it
** evaluates): an opcode outside the list yields NaN rather than a value.
*/
#define TK_PROG_EVAL_BODY(T, P, IN)                                           \
  T st_[TK_MAX_PROG], a, b, c;                                                \
  int sp_ = 0;                                                                \
  for (int i_ = 0; i_ < (P).n; i_++) {                                        \
    const tk_insn *ins_ = &(P).code[i_];                                      \
    if ((unsigned)ins_->op >= (unsigned)TK_NOPCODES) return (T)NAN;           \
    switch ((tk_opcode)ins_->op) {                                            \
    case TK_OP_INPUT: st_[sp_++] = (IN)[ins_->arg]; break;                    \
    case TK_OP_CONST: st_[sp_++] = (T)ins_->c; break;                         \
      TK_OPCODES(TK_OPCODE_NONE, TK_EVAL_BIN_, TK_EVAL_SEL_, TK_EVAL_UN_)     \
    }                                                                         \
  }                                                                           \
  return st_[0];
#define TK_EVAL_BIN_(NAME, name, expr)                                        \
  case TK_OP_##NAME:                                                          \
    b = st_[--sp_];                                                           \
    a = st_[sp_ - 1];                                                         \
    st_[sp_ - 1] = (expr);                                                    \
    break;
#define TK_EVAL_SEL_(NAME, name, expr)                                        \
  case TK_OP_##NAME:                                                          \
    c = st_[--sp_];                                                           \
    b = st_[--sp_];                                                           \
    a = st_[sp_ - 1];                                                         \
    st_[sp_ - 1] = (expr);                                                    \
    break;
#define TK_EVAL_UN_(NAME, name, expr)                                         \
  case TK_OP_##NAME:                                                          \
    a = st_[sp_ - 1];                                                         \
    st_[sp_ - 1] = (expr);                                                    \
    break;

#endif /* TRADB_OPCODES_H */
