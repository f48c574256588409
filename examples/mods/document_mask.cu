// mask_mod: document masking for packed sequences (several documents concatenated into
// one sequence). args.tensor[0] is a device array of int, one document id per position
// of the sequence; a query sees only the keys of its own document. Combine with --causal
// for causal attention within each document.
const int *doc = (const int *)args.tensor[0];
return doc[q_idx] == doc[kv_idx];
