// The action's post step: give back the turn the main step took, with the job's outcome.
//
// It runs even when the job failed or was cancelled (`post-if: always()`). It does not run when
// the runner itself died: then nothing releases the turn, and it ends when its lease runs out
// (input `expires`), after which the next waiter gets the key.

import * as core from '@actions/core';
import * as baton from './baton.js';

baton.entry(async () => {
  const ticket = core.getState('ticket');
  const key = core.getState('key');
  if (!ticket || !key) {
    core.info('baton: nothing to release: the main step did not take a turn');
    return;
  }
  core.setSecret(ticket);
  const serverToken = core.getState('server-token') || baton.input('token');
  if (serverToken) core.setSecret(serverToken);
  const bin = await baton.locateBaton({
    version: baton.input('baton-version'),
    url: baton.input('baton-url'),
    remembered: core.getState('baton'),
  });
  await baton.release(bin, {
    key,
    ticket,
    outcome: baton.outcomeFrom(baton.input('outcome')),
    store: core.getState('store'),
    serverToken,
    leaseUntil: core.getState('lease-until'),
  });
});
