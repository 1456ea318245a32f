// The action's post step: give back the turn the main step took, with the job's outcome, and see
// its keeper end.
//
// It runs even when the job failed or was cancelled (`post-if: always()`). It does not run when
// the runner itself died: then nothing releases the turn, but the keeper died with the runner,
// so the lease (input `lease`) runs out about one lease later and the next waiter gets the key.

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
  // The main step's token, an ID token included: a release needs the ticket's own token, and
  // a server with --trust takes it with an expired ID token beside it.
  const serverToken =
    core.getState('server-token') ||
    (await baton.serverTokenFor({
      tokenInput: baton.input('token'),
      store: core.getState('store'),
      audience: baton.input('audience'),
    }));
  if (serverToken) core.setSecret(serverToken);
  const bin = await baton.locateBaton({
    version: baton.input('baton-version'),
    url: baton.input('baton-url'),
    remembered: core.getState('baton'),
  });
  const keeperPid = core.getState('keeper-pid');
  const lease = core.getState('lease');
  const leaseUntil = core.getState('lease-until');
  const released = await baton.release(bin, {
    key,
    ticket,
    outcome: baton.outcomeFrom(baton.input('outcome')),
    store: core.getState('store'),
    serverToken,
    leaseEnds: keeperPid ? `within ${lease} once its keeper is stopped` : `at ${leaseUntil}`,
  });
  if (keeperPid) await baton.stopKeeper({ pid: keeperPid, key, lease, released });
});
