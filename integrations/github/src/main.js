// The action's main step: wait for a turn at the key, then hand the job its outputs and leave
// what the post step needs in the action's state. The turn is held from here to the post step,
// which the runner runs at the end of the job whatever happened in between (`post-if: always()`).

import * as core from '@actions/core';
import * as baton from './baton.js';

baton.entry(async () => {
  const options = baton.readAcquireInputs({ maskTicketByDefault: true });
  if (options.serverToken) core.setSecret(options.serverToken);
  const bin = await baton.locateBaton({ version: options.version, url: options.url });
  const turn = await baton.acquire(bin, options);
  // State first: if anything below failed, the post step must still give the turn back.
  core.saveState('baton', bin);
  core.saveState('key', turn.key);
  core.saveState('ticket', turn.token);
  core.saveState('store', options.store);
  core.saveState('lease-until', turn.leaseUntil);
  if (options.serverToken) core.saveState('server-token', options.serverToken);
  baton.setAcquireOutputs(turn, { maskTicket: options.maskTicket });
});
