// `acquire/`: the main step alone, for a turn taken in one job and given back in another by
// `release/` (the multi-job usage). Nothing releases the turn at the end of this job: the lease
// (input `expires`) must cover the jobs in between, and ends the turn if `release/` never runs.
//
// The ticket is not masked by default here: the runner drops a job output that contains a masked
// value ("Skip output 'ticket' since it may contain secret"), and passing the ticket to the
// releasing job is the point of this entry.

import * as core from '@actions/core';
import * as baton from './baton.js';

baton.entry(async () => {
  const options = baton.readAcquireInputs({ maskTicketByDefault: false });
  options.serverToken = await baton.serverTokenFor({
    tokenInput: options.serverToken,
    store: options.store,
    audience: options.audience,
  });
  const bin = await baton.locateBaton({ version: options.version, url: options.url });
  const turn = await baton.acquire(bin, options);
  baton.setAcquireOutputs(turn, { maskTicket: options.maskTicket });
});
