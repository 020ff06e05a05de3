'use strict';
// Reads deposits and payouts with Solana's official JavaScript client (@solana/web3.js,
// pinned in package.json), as an explorer or a wallet would, and checks their amounts.
//
// Usage: node web3check.js '<json>' with {rpc, mint, treasury, deposits: [{signature,
// amount}], payouts: [{signature, owner, amount}]} (amounts in base units, as strings).
// Prints {"ok": bool, "checked": n, "errors": [...]} and exits 1 when not ok.

const web3 = require('@solana/web3.js');

async function main() {
  const input = JSON.parse(process.argv[2]);
  const conn = new web3.Connection(input.rpc, 'confirmed');
  const mint = new web3.PublicKey(input.mint);
  const treasury = new web3.PublicKey(input.treasury);
  const errors = [];
  let checked = 0;
  const fail = (msg) => errors.push(msg);

  // The treasury's USDC account, found the way a wallet finds it.
  const accounts = await conn.getParsedTokenAccountsByOwner(treasury, { mint });
  if (accounts.value.length !== 1) fail('treasury: ' + accounts.value.length + ' USDC accounts, want 1');
  const treasuryATA = accounts.value.length ? accounts.value[0].pubkey : null;

  // Every signature that touched it, page by page (two a page).
  const seen = new Set();
  if (treasuryATA) {
    let before;
    for (;;) {
      const page = await conn.getSignaturesForAddress(treasuryATA, { limit: 2, before });
      if (page.length === 0) break;
      for (const s of page) seen.add(s.signature);
      before = page[page.length - 1].signature;
    }
  }

  // transfers lists a transaction's USDC transfers as {to (owner), amount}.
  async function transfers(signature) {
    const tx = await conn.getParsedTransaction(signature, { maxSupportedTransactionVersion: 0, commitment: 'confirmed' });
    if (!tx) throw new Error('transaction ' + signature + ' not found');
    if (tx.meta.err) throw new Error('transaction ' + signature + ' failed: ' + JSON.stringify(tx.meta.err));
    const ownerOf = {};
    for (const b of tx.meta.postTokenBalances || []) ownerOf[tx.transaction.message.accountKeys[b.accountIndex].pubkey.toBase58()] = b.owner;
    const out = [];
    const all = tx.transaction.message.instructions.concat(...(tx.meta.innerInstructions || []).map((g) => g.instructions));
    for (const ix of all) {
      if (!ix.parsed || ix.program !== 'spl-token' || ix.parsed.type !== 'transferChecked') continue;
      const info = ix.parsed.info;
      if (info.mint !== mint.toBase58()) continue;
      out.push({ to: ownerOf[info.destination], account: info.destination, amount: BigInt(info.tokenAmount.amount) });
    }
    return out;
  }

  for (const d of input.deposits) {
    checked++;
    if (!seen.has(d.signature)) fail('deposit ' + d.signature + ' is not in the treasury account\'s signatures');
    const ts = await transfers(d.signature);
    const got = ts.filter((t) => t.to === treasury.toBase58()).reduce((a, t) => a + t.amount, 0n);
    if (got !== BigInt(d.amount)) fail('deposit ' + d.signature + ': ' + got + ' to the treasury, want ' + d.amount);
  }
  for (const p of input.payouts) {
    checked++;
    if (!seen.has(p.signature)) fail('payout ' + p.signature + ' is not in the treasury account\'s signatures');
    const ts = await transfers(p.signature);
    const got = ts.filter((t) => t.to === p.owner).reduce((a, t) => a + t.amount, 0n);
    if (got !== BigInt(p.amount)) fail('payout ' + p.signature + ' to ' + p.owner + ': ' + got + ', want ' + p.amount);
    const held = await conn.getParsedTokenAccountsByOwner(new web3.PublicKey(p.owner), { mint });
    const balance = held.value.reduce((a, v) => a + BigInt(v.account.data.parsed.info.tokenAmount.amount), 0n);
    if (balance < BigInt(p.amount)) fail('payout owner ' + p.owner + ' holds ' + balance + ', less than ' + p.amount);
  }
  const ok = errors.length === 0;
  process.stdout.write(JSON.stringify({ ok, checked, errors }) + '\n');
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ ok: false, checked: 0, errors: [String(e && e.stack || e)] }) + '\n');
  process.exit(1);
});
