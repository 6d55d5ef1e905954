/*
** catalog/storeindex.c - a chunk store's index (see store_int.h): id ->
** entry, open addressing with linear probing, at most half full.  Callers
** hold the store's lock (for writing to change it).  The lowest of the
** store's files: it calls none of the others.
*/
#include "config.h"
#include "catalog/store_int.h"

#include <stdlib.h>
#include <string.h>

/* Chunk ids are random, but a stored id could be chosen by anyone: mix. */
static size_t s_hash(uint64_t id) {
  id ^= id >> 33;
  id *= 0xff51afd7ed558ccdull;
  id ^= id >> 33;
  return (size_t)id;
}

/* The slot holding id, or the empty slot where it would go (cap > 0).  The
** probe ends because the table is never more than half full. */
static size_t s_slot(const tc_store *s, uint64_t id) {
  size_t mask = s->cap - 1, i = s_hash(id) & mask;
  tr_assert(s->cap > 0 && (s->cap & mask) == 0);
  tr_assert((size_t)s->count * 2 <= s->cap);
  while (s->tab[i].id != 0 && s->tab[i].id != id) i = (i + 1) & mask;
  return i;
}

ci_entry *ci_find(tc_store *s, uint64_t id) {
  if (s->cap == 0 || id == 0) return NULL; /* 0 marks empty slots: never stored */
  ci_entry *e = &s->tab[s_slot(s, id)];
  return e->id == id ? e : NULL;
}

/* Make room for one more entry (load factor at most 1/2). */
int ci_reserve(tc_store *s) {
  if ((size_t)(s->count + 1) * 2 <= s->cap) return TR_OK;
  size_t ncap = s->cap ? s->cap * 2 : 64;
  ci_entry *old = s->tab, *nt = calloc(ncap, sizeof *nt);
  size_t ocap = s->cap;
  if (!nt) return TR_ENOMEM;
  s->tab = nt;
  s->cap = ncap;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].id != 0) {
      size_t j = s_slot(s, old[i].id);
      tr_assert(s->tab[j].id == 0); /* ids are unique */
      s->tab[j] = old[i];
    }
  free(old);
  return TR_OK;
}

/* Insert or replace (after s_reserve; a replaced entry's memory was let go). */
void ci_set(tc_store *s, const ci_entry *e) {
  ci_entry *slot = &s->tab[s_slot(s, e->id)];
  if (slot->id == 0) {
    tr_assert((size_t)(s->count + 1) * 2 <= s->cap); /* s_reserve made room */
    s->count++;
  } else {
    tr_assert(slot->mem == NULL);
    s->bytes -= (int64_t)slot->nbytes;
  }
  *slot = *e;
  s->bytes += (int64_t)e->nbytes;
}

/* Remove id, shifting later entries of its probe run back so lookups
** never stop early at the hole. */
void ci_remove(tc_store *s, uint64_t id) {
  if (NEVER(ci_find(s, id) == NULL)) return; /* callers remove what they found */
  size_t mask = s->cap - 1, i = s_slot(s, id), j = i;
  s->count--;
  s->bytes -= (int64_t)s->tab[i].nbytes;
  tr_assert(s->count >= 0 && s->bytes >= 0);
  tr_assert(s->tab[i].mem == NULL); /* callers let its memory go first */
  for (;;) {
    j = (j + 1) & mask;
    if (s->tab[j].id == 0) break;
    size_t home = s_hash(s->tab[j].id) & mask;
    /* The entry at j may fill the hole at i unless its home lies in the
    ** cyclic range (i, j]. */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      s->tab[i] = s->tab[j];
      i = j;
    }
  }
  memset(&s->tab[i], 0, sizeof s->tab[i]);
}

/* A chunk file verified by the scan at open. */
int ci_index_file(tc_store *s, ci_entry *e) {
  if (ci_reserve(s) != TR_OK) return TR_ENOMEM;
  e->seq = e->used = (uint64_t)atomic_fetch_add(&s->clock, 1);
  ci_set(s, e);
  return TR_OK;
}
