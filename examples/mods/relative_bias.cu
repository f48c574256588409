// score_mod: a relative-position bias, linear in the signed distance kv_idx - q_idx.
// args.scalar[0] is the bias per position (e.g. 0.01f); with args all zero this is the
// plain score.
return score + args.scalar[0] * (float)(kv_idx - q_idx);
