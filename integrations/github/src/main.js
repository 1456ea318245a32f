// The action's main step: wait for a turn at the key, then hand the job its outputs and leave
// what the post step needs in the action's state. The turn is held from here to the post step,
// which the runner runs at the end of the job whatever happened in between (`post-if: always()`).
//
// It is held on a short lease (input `lease`) that a keeper process (`baton acquire
// --keep-alive`) renews: a runner that dies mid-job takes the keeper with it, and the key is free
// about one lease later instead of when a lease sized for the whole job would have run out.
// `expires` bounds the whole turn (the keeper's --max-hold). The keeper inherits this step's
// environment, RUNNER_TRACKING_ID included, so the runner's end-of-job cleanup of leftover
// processes ends it too.

import * as core from '@actions/core';
import * as baton from './baton.js';

baton.entry(async () => {
  const options = baton.readAcquireInputs({ maskTicketByDefault: true, keepAlive: true });
  options.serverToken = await baton.serverTokenFor({
    tokenInput: options.serverToken,
    store: options.store,
    audience: options.audience,
  });
  const bin = await baton.locateBaton({ version: options.version, url: options.url });
  const turn = await baton.acquire(bin, options);
  // State first: if anything below failed, the post step must still give the turn back.
  core.saveState('baton', bin);
  core.saveState('key', turn.key);
  core.saveState('ticket', turn.token);
  core.saveState('store', options.store);
  core.saveState('lease-until', turn.leaseUntil);
  core.saveState('keeper-pid', turn.keeperPid);
  core.saveState('lease', turn.lease);
  if (options.serverToken) core.saveState('server-token', options.serverToken);
  baton.setAcquireOutputs(turn, { maskTicket: options.maskTicket });
});
