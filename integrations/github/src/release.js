// `release/`: gives back a turn that `acquire/` took in another job, from its `key` and `ticket`
// outputs. An empty ticket (the acquiring job failed or was skipped, and this job runs with
// `if: always()`) releases nothing and says so.

import * as core from '@actions/core';
import * as baton from './baton.js';

baton.entry(async () => {
  const key = baton.input('key');
  const ticket = baton.input('ticket');
  if (ticket) core.setSecret(ticket);
  if (!ticket) {
    core.info('baton: nothing to release: input `ticket` is empty (no turn was taken)');
    return;
  }
  if (!key) throw new Error('input `key` is required with `ticket` (the acquire step\'s `key` output)');
  const store = baton.storeFrom(baton.input('store'));
  const serverToken = await baton.serverTokenFor({
    tokenInput: baton.input('token'),
    store,
    audience: baton.input('audience'),
  });
  const bin = await baton.locateBaton({
    version: baton.input('baton-version'),
    url: baton.input('baton-url'),
  });
  await baton.release(bin, {
    key,
    ticket,
    outcome: baton.outcomeFrom(baton.input('outcome')),
    store,
    serverToken,
  });
});
