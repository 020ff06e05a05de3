'use strict';
// A local Solana JSON-RPC 2.0 server around one LiteSVM instance, for tests and the devnet.
//
// Usage: node server.js [--port N] [--genesis HASH] [--slot-ms MS]
//
// Prints one JSON line {"url","ws","genesis_hash"} on stdout when ready. Exits when stdin
// closes (so it never outlives its parent) and on SIGTERM/SIGINT.
//
// It speaks the standard Solana JSON-RPC shapes for the methods below, so unmodified
// clients (solana-go, @solana/web3.js) work against it. Non-standard methods for tests:
// gpunex_expireBlockhash (every blockhash issued so far becomes invalid) and
// gpunex_pruneHistory [bool] (while on, the node answers for no transaction before the
// slot at which it was turned on, like a non-archival RPC node), gpunex_holdFinality [bool]
// (while held, transactions landing from then on are only
// "confirmed": their status says so and getTransaction at "finalized" does not find them).
//
// Block height model: slot == block height. It advances by one for every landed
// transaction (and airdrop) and once every --slot-ms milliseconds (400 by default, like
// mainnet). Every advance rotates the blockhash. A blockhash is valid for 150 block heights
// after the height at which it was issued, as on a real cluster. LiteSVM itself only
// accepts its latest blockhash, so its own check is turned off and this server checks the
// age of the blockhash instead.

const http = require('http');
const crypto = require('crypto');
const { LiteSVM } = require('litesvm');
const internal = require('litesvm/dist/internal');

let WebSocketServer = null;
try {
  WebSocketServer = require('ws').WebSocketServer;
} catch (e) {
  WebSocketServer = null;
}

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const out = { port: 0, genesis: '', slotMs: 400, host: '127.0.0.1' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error('missing value for ' + a);
      return argv[++i];
    };
    if (a === '--port') out.port = Number(next());
    else if (a === '--genesis') out.genesis = next();
    else if (a === '--slot-ms') out.slotMs = Number(next());
    else if (a === '--host') out.host = next();
    else throw new Error('unknown argument ' + a);
  }
  return out;
}

// ---------------------------------------------------------------- base58

const B58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';
const B58MAP = new Map([...B58].map((c, i) => [c, i]));

function b58encode(bytes) {
  bytes = Uint8Array.from(bytes);
  let zeros = 0;
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++;
  const digits = [];
  for (let i = zeros; i < bytes.length; i++) {
    let carry = bytes[i];
    for (let j = 0; j < digits.length; j++) {
      carry += digits[j] << 8;
      digits[j] = carry % 58;
      carry = (carry / 58) | 0;
    }
    while (carry > 0) {
      digits.push(carry % 58);
      carry = (carry / 58) | 0;
    }
  }
  let s = '1'.repeat(zeros);
  for (let i = digits.length - 1; i >= 0; i--) s += B58[digits[i]];
  return s;
}

function b58decode(str) {
  if (typeof str !== 'string') throw rpcError(-32602, 'Invalid param: expected a base58 string');
  let zeros = 0;
  while (zeros < str.length && str[zeros] === '1') zeros++;
  const bytes = [];
  for (let i = zeros; i < str.length; i++) {
    const v = B58MAP.get(str[i]);
    if (v === undefined) throw rpcError(-32602, 'Invalid param: invalid base58 string');
    let carry = v;
    for (let j = 0; j < bytes.length; j++) {
      carry += bytes[j] * 58;
      bytes[j] = carry & 0xff;
      carry >>= 8;
    }
    while (carry > 0) {
      bytes.push(carry & 0xff);
      carry >>= 8;
    }
  }
  const out = new Uint8Array(zeros + bytes.length);
  for (let i = 0; i < bytes.length; i++) out[zeros + i] = bytes[bytes.length - 1 - i];
  return out;
}

function pubkeyParam(s) {
  const b = b58decode(s);
  if (b.length !== 32) throw rpcError(-32602, 'Invalid param: WrongSize');
  return b;
}

function signatureParam(s) {
  const b = b58decode(s);
  if (b.length !== 64) throw rpcError(-32602, 'Invalid param: WrongSize');
  return b;
}

// ---------------------------------------------------------------- errors

function rpcError(code, message, data) {
  const e = new Error(message);
  e.rpc = { code, message };
  if (data !== undefined) e.rpc.data = data;
  return e;
}

const INSTRUCTION_ERRORS = ('GenericError InvalidArgument InvalidInstructionData InvalidAccountData ' +
  'AccountDataTooSmall InsufficientFunds IncorrectProgramId MissingRequiredSignature ' +
  'AccountAlreadyInitialized UninitializedAccount UnbalancedInstruction ModifiedProgramId ' +
  'ExternalAccountLamportSpend ExternalAccountDataModified ReadonlyLamportChange ReadonlyDataModified ' +
  'DuplicateAccountIndex ExecutableModified RentEpochModified NotEnoughAccountKeys AccountDataSizeChanged ' +
  'AccountNotExecutable AccountBorrowFailed AccountBorrowOutstanding DuplicateAccountOutOfSync InvalidError ' +
  'ExecutableDataModified ExecutableLamportChange ExecutableAccountNotRentExempt UnsupportedProgramId ' +
  'CallDepth MissingAccount ReentrancyNotAllowed MaxSeedLengthExceeded InvalidSeeds InvalidRealloc ' +
  'ComputationalBudgetExceeded PrivilegeEscalation ProgramEnvironmentSetupFailure ProgramFailedToComplete ' +
  'ProgramFailedToCompile Immutable IncorrectAuthority AccountNotRentExempt InvalidAccountOwner ' +
  'ArithmeticOverflow UnsupportedSysvar IllegalOwner MaxAccountsDataAllocationsExceeded MaxAccountsExceeded ' +
  'MaxInstructionTraceLengthExceeded BuiltinProgramsMustConsumeComputeUnits BorshIoError').split(' ');

const TRANSACTION_ERRORS = ('AccountInUse AccountLoadedTwice AccountNotFound ProgramAccountNotFound ' +
  'InsufficientFundsForFee InvalidAccountForFee AlreadyProcessed BlockhashNotFound CallChainTooDeep ' +
  'MissingSignatureForFee InvalidAccountIndex SignatureFailure InvalidProgramForExecution SanitizeFailure ' +
  'ClusterMaintenance AccountBorrowOutstanding WouldExceedMaxBlockCostLimit UnsupportedVersion ' +
  'InvalidWritableAccount WouldExceedMaxAccountCostLimit WouldExceedAccountDataBlockLimit TooManyAccountLocks ' +
  'AddressLookupTableNotFound InvalidAddressLookupTableOwner InvalidAddressLookupTableData ' +
  'InvalidAddressLookupTableIndex InvalidRentPayingAccount WouldExceedMaxVoteCostLimit ' +
  'WouldExceedAccountDataTotalLimit MaxLoadedAccountsDataSizeExceeded ResanitizationNeeded ' +
  'InvalidLoadedAccountsDataSizeLimit UnbalancedTransaction ProgramCacheHitMaxLimit CommitCancelled').split(' ');

// Human-readable texts real validators use for the common transaction errors.
const TRANSACTION_ERROR_TEXT = {
  AlreadyProcessed: 'This transaction has already been processed',
  BlockhashNotFound: 'Blockhash not found',
  InsufficientFundsForFee: 'Insufficient funds for fee',
  AccountNotFound: 'Attempt to debit an account but found no record of a prior credit.',
  SignatureFailure: 'Transaction did not pass signature verification',
  SanitizeFailure: 'Transaction failed to sanitize accounts offsets correctly',
};

function instructionErrorJSON(e) {
  if (typeof e === 'number') return INSTRUCTION_ERRORS[e] || ('InstructionError' + e);
  if (e instanceof internal.InstructionErrorCustom) return { Custom: e.code };
  if (e && typeof e.msg === 'string') return { BorshIoError: e.msg };
  return String(e);
}

// transactionErrorJSON turns LiteSVM's error object into the JSON shape of Solana's
// TransactionError ("BlockhashNotFound", {"InstructionError":[0,{"Custom":1}]}, ...).
function transactionErrorJSON(e) {
  if (typeof e === 'number') return TRANSACTION_ERRORS[e] || ('TransactionError' + e);
  if (e instanceof internal.TransactionErrorInstructionError) return { InstructionError: [e.index, instructionErrorJSON(e.err())] };
  if (e instanceof internal.TransactionErrorDuplicateInstruction) return { DuplicateInstruction: e.index };
  if (e instanceof internal.TransactionErrorInsufficientFundsForRent) return { InsufficientFundsForRent: { account_index: e.accountIndex } };
  if (e instanceof internal.TransactionErrorProgramExecutionTemporarilyRestricted) return { ProgramExecutionTemporarilyRestricted: { account_index: e.accountIndex } };
  return String(e);
}

function transactionErrorText(err) {
  if (typeof err === 'string') return TRANSACTION_ERROR_TEXT[err] || err;
  if (err && err.InstructionError) {
    const [idx, ie] = err.InstructionError;
    const what = typeof ie === 'string' ? ie : (ie.Custom !== undefined ? 'custom program error: 0x' + ie.Custom.toString(16) : JSON.stringify(ie));
    return 'Error processing Instruction ' + idx + ': ' + what;
  }
  return JSON.stringify(err);
}

// ---------------------------------------------------------------- wire format

function readCompactU16(buf, off) {
  let value = 0;
  let shift = 0;
  for (let i = 0; i < 3; i++) {
    if (off.pos >= buf.length) throw new Error('truncated');
    const b = buf[off.pos++];
    value |= (b & 0x7f) << shift;
    if ((b & 0x80) === 0) return value;
    shift += 7;
  }
  throw new Error('bad compact-u16');
}

function take(buf, off, n) {
  if (off.pos + n > buf.length) throw new Error('truncated');
  const out = buf.subarray(off.pos, off.pos + n);
  off.pos += n;
  return out;
}

// parseMessage decodes a legacy or v0 message. off.pos is advanced past it.
function parseMessage(buf, off) {
  const start = off.pos;
  let version = 'legacy';
  if (buf[off.pos] & 0x80) {
    version = buf[off.pos] & 0x7f;
    off.pos++;
    if (version !== 0) throw new Error('unsupported transaction version ' + version);
  }
  const h = take(buf, off, 3);
  const header = { numRequiredSignatures: h[0], numReadonlySignedAccounts: h[1], numReadonlyUnsignedAccounts: h[2] };
  const nkeys = readCompactU16(buf, off);
  const accountKeys = [];
  for (let i = 0; i < nkeys; i++) accountKeys.push(Buffer.from(take(buf, off, 32)));
  const recentBlockhash = b58encode(take(buf, off, 32));
  const nix = readCompactU16(buf, off);
  const instructions = [];
  for (let i = 0; i < nix; i++) {
    const programIdIndex = take(buf, off, 1)[0];
    const na = readCompactU16(buf, off);
    const accounts = Array.from(take(buf, off, na));
    const nd = readCompactU16(buf, off);
    const data = Buffer.from(take(buf, off, nd));
    instructions.push({ programIdIndex, accounts, data });
  }
  const addressTableLookups = [];
  if (version === 0) {
    const nl = readCompactU16(buf, off);
    for (let i = 0; i < nl; i++) {
      const accountKey = Buffer.from(take(buf, off, 32));
      const nw = readCompactU16(buf, off);
      const writableIndexes = Array.from(take(buf, off, nw));
      const nr = readCompactU16(buf, off);
      const readonlyIndexes = Array.from(take(buf, off, nr));
      addressTableLookups.push({ accountKey, writableIndexes, readonlyIndexes });
    }
  }
  return { version, header, accountKeys, recentBlockhash, instructions, addressTableLookups, bytes: buf.subarray(start, off.pos) };
}

function parseTransaction(buf) {
  const off = { pos: 0 };
  const nsig = readCompactU16(buf, off);
  const signatures = [];
  for (let i = 0; i < nsig; i++) signatures.push(Buffer.from(take(buf, off, 64)));
  const message = parseMessage(buf, off);
  if (off.pos !== buf.length) throw new Error('trailing bytes after transaction');
  if (nsig === 0 || nsig !== message.header.numRequiredSignatures) throw new Error('signature count does not match the message header');
  return { signatures, message };
}

// ---------------------------------------------------------------- SPL layouts

const TOKEN_PROGRAM = 'TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA';
const TOKEN_2022_PROGRAM = 'TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb';
const COMPUTE_BUDGET_PROGRAM = 'ComputeBudget111111111111111111111111111111';
const ALT_PROGRAM = 'AddressLookupTab1e1111111111111111111111111';

function isTokenProgram(owner) {
  return owner === TOKEN_PROGRAM || owner === TOKEN_2022_PROGRAM;
}

function readU64(b, o) {
  return Buffer.from(b.buffer, b.byteOffset, b.length).readBigUInt64LE(o);
}
function readU32(b, o) {
  return Buffer.from(b.buffer, b.byteOffset, b.length).readUInt32LE(o);
}

function parseMint(data) {
  if (data.length < 82) return null;
  if (data.length > 82 && !(data.length > 165 && data[165] === 1)) return null;
  if (data[45] !== 1) return null; // not initialized
  return {
    mintAuthority: readU32(data, 0) === 1 ? b58encode(data.subarray(4, 36)) : null,
    supply: readU64(data, 36),
    decimals: data[44],
    isInitialized: true,
    freezeAuthority: readU32(data, 46) === 1 ? b58encode(data.subarray(50, 82)) : null,
  };
}

function parseTokenAccount(data) {
  if (data.length < 165) return null;
  if (data.length > 165 && data[165] !== 2) return null;
  const state = data[108];
  if (state === 0) return null; // uninitialized
  return {
    mint: b58encode(data.subarray(0, 32)),
    owner: b58encode(data.subarray(32, 64)),
    amount: readU64(data, 64),
    delegate: readU32(data, 72) === 1 ? b58encode(data.subarray(76, 108)) : null,
    state: state === 2 ? 'frozen' : 'initialized',
    isNative: readU32(data, 109) === 1,
    delegatedAmount: readU64(data, 121),
    closeAuthority: readU32(data, 129) === 1 ? b58encode(data.subarray(133, 165)) : null,
  };
}

function uiAmount(amount, decimals) {
  const s = amount.toString().padStart(decimals + 1, '0');
  let str = decimals > 0 ? s.slice(0, s.length - decimals) + '.' + s.slice(s.length - decimals) : s;
  if (decimals > 0) str = str.replace(/0+$/, '').replace(/\.$/, '');
  return { amount: amount.toString(), decimals, uiAmount: Number(str), uiAmountString: str };
}

// ---------------------------------------------------------------- state

const opts = parseArgs(process.argv.slice(2));
const svm = new LiteSVM();
const core = svm.inner; // the native instance: takes raw wire bytes
core.setBlockhashCheck(false); // this server checks blockhash age itself (see the header)

const genesisHash = opts.genesis || b58encode(crypto.randomBytes(32));
const MAX_AGE = 150n;
let height = 1n; // slot == block height
const blockhashes = new Map(); // blockhash -> height at which it was issued
let current = core.latestBlockhash();
blockhashes.set(current, height);
let expiredFloor = 0n; // blockhashes issued at or below this height are invalid

const txs = new Map(); // signature (base58) -> record
const byAddress = new Map(); // address (base58) -> [signature, ...] oldest first
let transactionCount = 0n;
// firstAvailable is the oldest slot whose transactions this node still answers for, like
// an RPC node that pruned its history (gpunex_pruneHistory); 0 keeps everything.
let firstAvailable = 0n;
const waiters = new Map(); // signature -> [callback]

function advance() {
  height += 1n;
  core.expireBlockhash();
  current = core.latestBlockhash();
  blockhashes.set(current, height);
  if (blockhashes.size > 600) {
    for (const [h, at] of blockhashes) {
      if (at + MAX_AGE * 2n < height) blockhashes.delete(h);
    }
  }
}

function blockhashValid(hash) {
  const at = blockhashes.get(hash);
  if (at === undefined) return false;
  if (at <= expiredFloor) return false;
  return height <= at + MAX_AGE;
}

function context() {
  return { slot: height, apiVersion: '2.2.0' };
}

function accountOf(pk) {
  const a = core.getAccount(pk);
  if (!a) return null;
  const lamports = a.lamports();
  const data = Buffer.from(a.data());
  // LiteSVM may keep closed accounts as empty system-owned records.
  const owner = b58encode(a.owner());
  if (lamports === 0n && data.length === 0) return null;
  return { lamports, data, owner, executable: a.executable(), rentEpoch: a.rentEpoch() };
}

function mintDecimals(mintB58) {
  try {
    const a = accountOf(b58decode(mintB58));
    if (!a || !isTokenProgram(a.owner)) return null;
    const m = parseMint(a.data);
    return m ? m.decimals : null;
  } catch (e) {
    return null;
  }
}

function tokenBalances(keys) {
  const out = [];
  keys.forEach((k, i) => {
    const a = accountOf(k);
    if (!a || !isTokenProgram(a.owner)) return;
    const t = parseTokenAccount(a.data);
    if (!t) return;
    const dec = mintDecimals(t.mint);
    if (dec === null) return;
    out.push({ accountIndex: i, mint: t.mint, owner: t.owner, programId: a.owner, uiTokenAmount: uiAmount(t.amount, dec) });
  });
  return out;
}

function lamportBalances(keys) {
  return keys.map((k) => {
    const b = core.getBalance(k);
    return b === null || b === undefined ? 0n : b;
  });
}

// loadedAddresses resolves a v0 message's address table lookups.
function loadedAddresses(msg) {
  const writable = [];
  const readonly = [];
  for (const l of msg.addressTableLookups) {
    const a = accountOf(l.accountKey);
    if (!a || a.owner !== ALT_PROGRAM) throw rpcError(-32002, 'Transaction simulation failed: AddressLookupTableNotFound', { err: 'AddressLookupTableNotFound', logs: [] });
    const n = Math.floor((a.data.length - 56) / 32);
    const at = (i) => {
      if (i >= n) throw rpcError(-32002, 'Transaction simulation failed: InvalidAddressLookupTableIndex', { err: 'InvalidAddressLookupTableIndex', logs: [] });
      return Buffer.from(a.data.subarray(56 + i * 32, 88 + i * 32));
    };
    for (const i of l.writableIndexes) writable.push(at(i));
    for (const i of l.readonlyIndexes) readonly.push(at(i));
  }
  return { writable, readonly };
}

// feeOf computes the fee the runtime charges: 5000 lamports a signature plus the
// priority fee set with ComputeBudget instructions.
function feeOf(msg, keys) {
  let fee = 5000n * BigInt(msg.header.numRequiredSignatures);
  let price = 0n;
  let limit = null;
  let others = 0;
  for (const ix of msg.instructions) {
    const prog = keys[ix.programIdIndex] ? b58encode(keys[ix.programIdIndex]) : '';
    if (prog === COMPUTE_BUDGET_PROGRAM) {
      if (ix.data[0] === 2 && ix.data.length >= 5) limit = BigInt(ix.data.readUInt32LE(1));
      if (ix.data[0] === 3 && ix.data.length >= 9) price = ix.data.readBigUInt64LE(1);
    } else {
      others++;
    }
  }
  if (price > 0n) {
    if (limit === null) limit = BigInt(Math.min(1400000, 200000 * others));
    fee += (price * limit + 999999n) / 1000000n;
  }
  return fee;
}

function logsOf(meta) {
  try {
    return meta.logs();
  } catch (e) {
    return [];
  }
}

function innerInstructionsOf(meta) {
  const out = [];
  let inner;
  try {
    inner = meta.innerInstructions();
  } catch (e) {
    return out;
  }
  inner.forEach((list, index) => {
    if (!list || list.length === 0) return;
    out.push({
      index,
      instructions: list.map((ii) => {
        const ci = ii.instruction();
        return { programIdIndex: ci.programIdIndex(), accounts: Array.from(ci.accounts()), data: b58encode(ci.data()), stackHeight: ii.stackHeight() };
      }),
    });
  });
  return out;
}

function indexTx(sig, keys) {
  const seen = new Set();
  for (const k of keys) {
    const a = b58encode(k);
    if (seen.has(a)) continue;
    seen.add(a);
    let list = byAddress.get(a);
    if (!list) byAddress.set(a, (list = []));
    list.push(sig);
  }
}

function notify(sig) {
  const ws = waiters.get(sig);
  if (!ws) return;
  waiters.delete(sig);
  for (const f of ws) {
    try {
      f(txs.get(sig));
    } catch (e) {
      // a closed websocket; nothing to do
    }
  }
}

// ---------------------------------------------------------------- transactions

function decodeWire(param, encoding) {
  if (typeof param !== 'string') throw rpcError(-32602, 'Invalid params: expected an encoded transaction string');
  let raw;
  if (encoding === 'base58') raw = Buffer.from(b58decode(param));
  else if (!encoding || encoding === 'base64') raw = Buffer.from(param, 'base64');
  else throw rpcError(-32602, 'Invalid params: unsupported encoding ' + encoding);
  if (raw.length > 1232) throw rpcError(-32602, 'base64 encoded solana_sdk::transaction::versioned::VersionedTransaction too large: ' + raw.length + ' bytes (max: encoded/raw 1644/1232)');
  let tx;
  try {
    tx = parseTransaction(raw);
  } catch (e) {
    throw rpcError(-32602, 'invalid transaction: ' + e.message);
  }
  return { raw, tx };
}

function simulationFailed(err, logs, extra) {
  const data = Object.assign({ accounts: null, err, innerInstructions: null, logs: logs || [], replacementBlockhash: null, returnData: null, unitsConsumed: 0 }, extra || {});
  return rpcError(-32002, 'Transaction simulation failed: ' + transactionErrorText(err), data);
}

function sendTransaction(params) {
  const cfg = params[1] || {};
  const { raw, tx } = decodeWire(params[0], cfg.encoding);
  const sig = b58encode(tx.signatures[0]);
  if (txs.has(sig)) {
    throw simulationFailed('AlreadyProcessed', []);
  }
  if (!blockhashValid(tx.message.recentBlockhash)) {
    throw simulationFailed('BlockhashNotFound', []);
  }
  const loaded = loadedAddresses(tx.message);
  const keys = tx.message.accountKeys.concat(loaded.writable, loaded.readonly);
  const versioned = tx.message.version !== 'legacy';

  if (!cfg.skipPreflight) {
    const sim = versioned ? core.simulateVersionedTransaction(raw) : core.simulateLegacyTransaction(raw);
    if (sim instanceof internal.FailedTransactionMetadata) {
      const err = transactionErrorJSON(sim.err());
      throw simulationFailed(err, logsOf(sim.meta()), { unitsConsumed: Number(sim.meta().computeUnitsConsumed()) });
    }
  }

  const preBalances = lamportBalances(keys);
  const preTokenBalances = tokenBalances(keys);
  const res = versioned ? core.sendVersionedTransaction(raw) : core.sendLegacyTransaction(raw);
  let err = null;
  let meta = res;
  if (res instanceof internal.FailedTransactionMetadata) {
    err = transactionErrorJSON(res.err());
    meta = res.meta();
    // Errors that keep a transaction off the ledger entirely (no fee charged).
    const postLamports = lamportBalances([keys[0]])[0];
    if (postLamports === preBalances[0]) {
      throw simulationFailed(err, logsOf(meta));
    }
  }
  const postBalances = lamportBalances(keys);
  const postTokenBalances = tokenBalances(keys);
  advance();
  transactionCount += 1n;
  const rec = {
    signature: sig,
    raw,
    tx,
    slot: height,
    blockTime: Math.floor(Date.now() / 1000),
    err,
    fee: feeOf(tx.message, keys),
    preBalances,
    postBalances,
    preTokenBalances,
    postTokenBalances,
    logs: logsOf(meta),
    innerInstructions: innerInstructionsOf(meta),
    computeUnitsConsumed: meta.computeUnitsConsumed(),
    loaded,
    keys,
  };
  txs.set(sig, rec);
  indexTx(sig, keys);
  notify(sig);
  return sig;
}

function simulateTransaction(params) {
  const cfg = params[1] || {};
  const { raw, tx } = decodeWire(params[0], cfg.encoding);
  const versioned = tx.message.version !== 'legacy';
  if (!cfg.replaceRecentBlockhash && !blockhashValid(tx.message.recentBlockhash)) {
    return { context: context(), value: { err: 'BlockhashNotFound', logs: [], accounts: null, unitsConsumed: 0, returnData: null } };
  }
  const sim = versioned ? core.simulateVersionedTransaction(raw) : core.simulateLegacyTransaction(raw);
  if (sim instanceof internal.FailedTransactionMetadata) {
    return { context: context(), value: { err: transactionErrorJSON(sim.err()), logs: logsOf(sim.meta()), accounts: null, unitsConsumed: sim.meta().computeUnitsConsumed(), returnData: null } };
  }
  const m = sim.meta();
  return { context: context(), value: { err: null, logs: logsOf(m), accounts: null, unitsConsumed: m.computeUnitsConsumed(), returnData: null } };
}

function requestAirdrop(params) {
  const pk = pubkeyParam(params[0]);
  let lamports;
  try {
    lamports = BigInt(params[1]);
  } catch (e) {
    throw rpcError(-32602, 'Invalid params: lamports');
  }
  if (lamports <= 0n) throw rpcError(-32602, 'Invalid params: lamports must be positive');
  const res = core.airdrop(pk, lamports);
  if (!res) throw rpcError(-32603, 'airdrop failed');
  if (res instanceof internal.FailedTransactionMetadata) {
    throw rpcError(-32603, 'airdrop failed: ' + transactionErrorText(transactionErrorJSON(res.err())));
  }
  const sig = b58encode(res.signature());
  advance();
  transactionCount += 1n;
  txs.set(sig, { signature: sig, raw: null, slot: height, blockTime: Math.floor(Date.now() / 1000), err: null });
  indexTx(sig, [pk]);
  notify(sig);
  return sig;
}

// Finality: every landed transaction is final at once, unless gpunex_holdFinality holds
// back those landing after finalFloor.
let finalityHeld = false;
let finalFloor = 0;

function isFinal(rec) {
  return !(finalityHeld && rec.slot > finalFloor);
}

function statusOf(rec) {
  if (!rec || BigInt(rec.slot) < firstAvailable) return null;
  return {
    slot: rec.slot,
    confirmations: isFinal(rec) ? null : 1,
    err: rec.err,
    status: rec.err === null ? { Ok: null } : { Err: rec.err },
    confirmationStatus: isFinal(rec) ? 'finalized' : 'confirmed',
  };
}

function getTransaction(params) {
  const sig = b58encode(signatureParam(params[0]));
  let cfg = params[1] || {};
  if (typeof cfg === 'string') cfg = { encoding: cfg };
  const rec = txs.get(sig);
  if (!rec || !rec.raw || BigInt(rec.slot) < firstAvailable) return null;
  if (cfg.commitment === 'finalized' && !isFinal(rec)) return null;
  const versioned = rec.tx.message.version !== 'legacy';
  const maxVersion = cfg.maxSupportedTransactionVersion;
  if (versioned && (maxVersion === undefined || maxVersion === null || maxVersion < rec.tx.message.version)) {
    throw rpcError(-32015, 'Transaction version (' + rec.tx.message.version + ') is not supported by the requesting client. Please try the request again with the following configuration parameter: "maxSupportedTransactionVersion": 0');
  }
  const encoding = cfg.encoding || 'json';
  let transaction;
  if (encoding === 'base64') transaction = [rec.raw.toString('base64'), 'base64'];
  else if (encoding === 'base58') transaction = [b58encode(rec.raw), 'base58'];
  else if (encoding === 'jsonParsed') transaction = parsedTransaction(rec);
  else if (encoding === 'json') {
    const m = rec.tx.message;
    const message = {
      accountKeys: m.accountKeys.map(b58encode),
      header: m.header,
      recentBlockhash: m.recentBlockhash,
      instructions: m.instructions.map((ix) => ({ programIdIndex: ix.programIdIndex, accounts: ix.accounts, data: b58encode(ix.data), stackHeight: null })),
    };
    if (versioned) {
      message.addressTableLookups = m.addressTableLookups.map((l) => ({ accountKey: b58encode(l.accountKey), writableIndexes: l.writableIndexes, readonlyIndexes: l.readonlyIndexes }));
    }
    transaction = { signatures: rec.tx.signatures.map(b58encode), message };
  } else {
    throw rpcError(-32602, 'Invalid params: unsupported encoding ' + encoding);
  }
  const out = {
    slot: rec.slot,
    blockTime: rec.blockTime,
    transaction,
    meta: {
      err: rec.err,
      status: rec.err === null ? { Ok: null } : { Err: rec.err },
      fee: rec.fee,
      preBalances: rec.preBalances,
      postBalances: rec.postBalances,
      innerInstructions: encoding === 'jsonParsed'
        ? rec.innerInstructions.map((g) => ({ index: g.index, instructions: g.instructions.map((ix) => parsedInstruction(rec.keys, ix.programIdIndex, ix.accounts, Buffer.from(b58decode(ix.data)), ix.stackHeight)) }))
        : rec.innerInstructions,
      logMessages: rec.logs,
      preTokenBalances: rec.preTokenBalances,
      postTokenBalances: rec.postTokenBalances,
      rewards: [],
      loadedAddresses: { writable: rec.loaded.writable.map(b58encode), readonly: rec.loaded.readonly.map(b58encode) },
      computeUnitsConsumed: rec.computeUnitsConsumed,
    },
  };
  if (maxVersion !== undefined && maxVersion !== null) out.version = versioned ? rec.tx.message.version : 'legacy';
  return out;
}

// ---------------------------------------------------------------- jsonParsed

const ATA_PROGRAM = 'ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL';
const SYSTEM_PROGRAM = '11111111111111111111111111111111';
const MEMO_PROGRAMS = ['MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr', 'Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo'];

// parsedTransaction is a transaction as jsonParsed shows it: account keys as objects with
// their signer and writable flags, instructions of the programs it knows parsed.
function parsedTransaction(rec) {
  const m = rec.tx.message;
  const h = m.header;
  const n = m.accountKeys.length;
  const writable = (i) => {
    if (i < h.numRequiredSignatures) return i < h.numRequiredSignatures - h.numReadonlySignedAccounts;
    if (i < n) return i < n - h.numReadonlyUnsignedAccounts;
    return i < n + rec.loaded.writable.length;
  };
  const accountKeys = rec.keys.map((k, i) => ({ pubkey: b58encode(k), signer: i < h.numRequiredSignatures, source: i < n ? 'transaction' : 'lookupTable', writable: writable(i) }));
  const message = {
    accountKeys,
    recentBlockhash: m.recentBlockhash,
    instructions: m.instructions.map((ix) => parsedInstruction(rec.keys, ix.programIdIndex, ix.accounts, ix.data, null)),
  };
  if (m.version !== 'legacy') {
    message.addressTableLookups = m.addressTableLookups.map((l) => ({ accountKey: b58encode(l.accountKey), writableIndexes: l.writableIndexes, readonlyIndexes: l.readonlyIndexes }));
  }
  return { signatures: rec.tx.signatures.map(b58encode), message };
}

// parsedInstruction parses the instructions gpunex's transactions use (SPL Token transfers,
// associated token accounts, memos, system transfers) as the standard RPC does; any other is
// partially decoded (program, accounts, data in base58).
function parsedInstruction(keys, programIdIndex, accountIdx, data, stackHeight) {
  const programId = b58encode(keys[programIdIndex]);
  const acc = Array.from(accountIdx).map((i) => b58encode(keys[i]));
  const parsed = (program, p) => ({ program, programId, parsed: p, stackHeight });
  try {
    if ((programId === TOKEN_PROGRAM || programId === TOKEN_2022_PROGRAM) && data.length > 0) {
      const program = programId === TOKEN_PROGRAM ? 'spl-token' : 'spl-token-2022';
      const amount = () => data.readBigUInt64LE(1);
      switch (data[0]) {
        case 3:
          return parsed(program, { type: 'transfer', info: { source: acc[0], destination: acc[1], authority: acc[2], amount: amount().toString() } });
        case 12:
          return parsed(program, { type: 'transferChecked', info: { source: acc[0], mint: acc[1], destination: acc[2], authority: acc[3], tokenAmount: uiAmount(amount(), data[9]) } });
        case 7:
          return parsed(program, { type: 'mintTo', info: { mint: acc[0], account: acc[1], mintAuthority: acc[2], amount: amount().toString() } });
        case 9:
          return parsed(program, { type: 'closeAccount', info: { account: acc[0], destination: acc[1], owner: acc[2] } });
        case 1:
          return parsed(program, { type: 'initializeAccount', info: { account: acc[0], mint: acc[1], owner: acc[2], rentSysvar: acc[3] } });
        case 18:
          return parsed(program, { type: 'initializeAccount3', info: { account: acc[0], mint: acc[1], owner: b58encode(data.subarray(1, 33)) } });
        case 22:
          return parsed(program, { type: 'initializeImmutableOwner', info: { account: acc[0] } });
      }
    }
    if (programId === ATA_PROGRAM) {
      const type = data.length === 0 || data[0] === 0 ? 'create' : data[0] === 1 ? 'createIdempotent' : null;
      if (type) return parsed('spl-associated-token-account', { type, info: { source: acc[0], account: acc[1], wallet: acc[2], mint: acc[3], systemProgram: acc[4], tokenProgram: acc[5] } });
    }
    if (MEMO_PROGRAMS.includes(programId)) return parsed('spl-memo', data.toString('utf8'));
    if (programId === SYSTEM_PROGRAM && data.length >= 4) {
      const kind = data.readUInt32LE(0);
      if (kind === 2) return parsed('system', { type: 'transfer', info: { source: acc[0], destination: acc[1], lamports: Number(data.readBigUInt64LE(4)) } });
      if (kind === 0) return parsed('system', { type: 'createAccount', info: { source: acc[0], newAccount: acc[1], lamports: Number(data.readBigUInt64LE(4)), space: Number(data.readBigUInt64LE(12)), owner: b58encode(data.subarray(20, 52)) } });
    }
  } catch (e) {
    // A malformed instruction is shown partially decoded.
  }
  return { programId, accounts: acc, data: b58encode(data), stackHeight };
}

// getTokenAccountsByOwner lists the token accounts an owner holds, of one mint or one token
// program: every account a transaction touched is known here.
function getTokenAccountsByOwner(params) {
  const owner = b58encode(pubkeyParam(params[0]));
  const filter = params[1] || {};
  const cfg = params[2] || {};
  if (!filter.mint && !filter.programId) throw rpcError(-32602, 'Invalid params: expected a mint or a programId filter');
  const value = [];
  for (const addr of byAddress.keys()) {
    const a = accountOf(pubkeyParam(addr));
    if (!a || !isTokenProgram(a.owner)) continue;
    if (filter.programId && a.owner !== filter.programId) continue;
    const t = parseTokenAccount(a.data);
    if (!t || t.owner !== owner || (filter.mint && t.mint !== filter.mint)) continue;
    value.push({ pubkey: addr, account: encodeAccount(a, cfg) });
  }
  return { context: context(), value };
}

function encodeAccount(a, cfg) {
  if (!a) return null;
  const encoding = cfg.encoding || 'base58';
  let data = a.data;
  if (cfg.dataSlice && typeof cfg.dataSlice.offset === 'number' && typeof cfg.dataSlice.length === 'number') {
    data = data.subarray(cfg.dataSlice.offset, cfg.dataSlice.offset + cfg.dataSlice.length);
  }
  let out;
  if (encoding === 'jsonParsed') {
    const parsed = parseAccountJSON(a);
    if (parsed) out = parsed;
    else out = [data.toString('base64'), 'base64'];
  } else if (encoding === 'base64') out = [data.toString('base64'), 'base64'];
  else if (encoding === 'base58') out = [b58encode(data), 'base58'];
  else throw rpcError(-32602, 'Invalid params: unsupported encoding ' + encoding);
  return { data: out, executable: a.executable, lamports: a.lamports, owner: a.owner, rentEpoch: a.rentEpoch, space: a.data.length };
}

function parseAccountJSON(a) {
  if (!isTokenProgram(a.owner)) return null;
  const program = a.owner === TOKEN_PROGRAM ? 'spl-token' : 'spl-token-2022';
  const m = parseMint(a.data);
  if (m) {
    return {
      program,
      parsed: { type: 'mint', info: { mintAuthority: m.mintAuthority, supply: m.supply.toString(), decimals: m.decimals, isInitialized: true, freezeAuthority: m.freezeAuthority } },
      space: a.data.length,
    };
  }
  const t = parseTokenAccount(a.data);
  if (t) {
    const dec = mintDecimals(t.mint);
    if (dec === null) return null;
    const info = { isNative: t.isNative, mint: t.mint, owner: t.owner, state: t.state, tokenAmount: uiAmount(t.amount, dec) };
    if (t.delegate) {
      info.delegate = t.delegate;
      info.delegatedAmount = uiAmount(t.delegatedAmount, dec);
    }
    if (t.closeAuthority) info.closeAuthority = t.closeAuthority;
    return { program, parsed: { type: 'account', info }, space: a.data.length };
  }
  return null;
}

function getSignaturesForAddress(params) {
  const addr = b58encode(pubkeyParam(params[0]));
  const cfg = params[1] || {};
  const limit = Math.min(Math.max(Number(cfg.limit) || 1000, 1), 1000);
  const list = byAddress.get(addr) || [];
  const out = [];
  let started = !cfg.before;
  for (let i = list.length - 1; i >= 0 && out.length < limit; i--) {
    const sig = list[i];
    if (!started) {
      if (sig === cfg.before) started = true;
      continue;
    }
    if (cfg.until && sig === cfg.until) break;
    const rec = txs.get(sig);
    let memo = null;
    if (rec.tx) {
      const memos = [];
      for (const ix of rec.tx.message.instructions) {
        const p = b58encode(rec.keys[ix.programIdIndex]);
        if (p === 'MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr' || p === 'Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo') {
          memos.push('[' + ix.data.length + '] ' + ix.data.toString('utf8'));
        }
      }
      if (memos.length) memo = memos.join('; ');
    }
    out.push({ signature: sig, slot: rec.slot, err: rec.err, memo, blockTime: rec.blockTime, confirmationStatus: isFinal(rec) ? 'finalized' : 'confirmed' });
  }
  return out;
}

// ---------------------------------------------------------------- dispatch

const methods = {
  getHealth: () => 'ok',
  getVersion: () => ({ 'solana-core': '2.2.0', 'feature-set': 0, litesvm: '1.4.1' }),
  getGenesisHash: () => genesisHash,
  getIdentity: () => ({ identity: b58encode(crypto.createHash('sha256').update(genesisHash).digest()) }),
  getSlot: () => height,
  getBlockHeight: () => height,
  getTransactionCount: () => transactionCount,
  getEpochInfo: () => ({ absoluteSlot: height, blockHeight: height, epoch: 0, slotIndex: height, slotsInEpoch: 432000, transactionCount }),
  getLatestBlockhash: () => ({ context: context(), value: { blockhash: current, lastValidBlockHeight: blockhashes.get(current) + MAX_AGE } }),
  isBlockhashValid: (p) => ({ context: context(), value: blockhashValid(typeof p[0] === 'string' ? p[0] : '') }),
  getFeeForMessage: (p) => {
    const buf = Buffer.from(String(p[0]), 'base64');
    let msg;
    try {
      msg = parseMessage(buf, { pos: 0 });
    } catch (e) {
      throw rpcError(-32602, 'Invalid params: invalid message: ' + e.message);
    }
    if (!blockhashValid(msg.recentBlockhash)) return { context: context(), value: null };
    return { context: context(), value: feeOf(msg, msg.accountKeys) };
  },
  getBalance: (p) => ({ context: context(), value: (accountOf(pubkeyParam(p[0])) || { lamports: 0n }).lamports }),
  getMinimumBalanceForRentExemption: (p) => core.minimumBalanceForRentExemption(BigInt(Number(p[0]) || 0)),
  requestAirdrop,
  sendTransaction,
  simulateTransaction,
  getSignatureStatuses: (p) => {
    if (!Array.isArray(p[0])) throw rpcError(-32602, 'Invalid params: expected an array of signatures');
    if (p[0].length > 256) throw rpcError(-32602, 'Invalid params: too many inputs provided; max 256');
    return { context: context(), value: p[0].map((s) => statusOf(txs.get(b58encode(signatureParam(s))))) };
  },
  getTransaction,
  getSignaturesForAddress,
  getTokenAccountsByOwner,
  getAccountInfo: (p) => ({ context: context(), value: encodeAccount(accountOf(pubkeyParam(p[0])), p[1] || {}) }),
  getMultipleAccounts: (p) => {
    if (!Array.isArray(p[0])) throw rpcError(-32602, 'Invalid params: expected an array of public keys');
    return { context: context(), value: p[0].map((k) => encodeAccount(accountOf(pubkeyParam(k)), p[1] || {})) };
  },
  getTokenAccountBalance: (p) => {
    const a = accountOf(pubkeyParam(p[0]));
    const t = a && isTokenProgram(a.owner) ? parseTokenAccount(a.data) : null;
    const dec = t ? mintDecimals(t.mint) : null;
    if (!t || dec === null) throw rpcError(-32602, 'Invalid param: could not find account');
    return { context: context(), value: uiAmount(t.amount, dec) };
  },
  getTokenSupply: (p) => {
    const a = accountOf(pubkeyParam(p[0]));
    const m = a && isTokenProgram(a.owner) ? parseMint(a.data) : null;
    if (!m) throw rpcError(-32602, 'Invalid param: not a Token mint');
    return { context: context(), value: uiAmount(m.supply, m.decimals) };
  },
  getFirstAvailableBlock: () => firstAvailable,
  minimumLedgerSlot: () => firstAvailable,
  gpunex_pruneHistory: (p) => {
    // [true]: forget every transaction before the current slot, as an RPC node without
    // archival history does; [false]: remember them again.
    firstAvailable = p && p[0] ? height + 1n : 0n;
    return firstAvailable;
  },
  gpunex_holdFinality: (p) => {
    finalityHeld = !!(p && p[0]);
    finalFloor = height;
    return finalityHeld;
  },
  gpunex_expireBlockhash: () => {
    // Every blockhash issued so far becomes invalid, and the block height moves past
    // every lastValidBlockHeight handed out, as if 151 blocks had passed.
    expiredFloor = height;
    height += MAX_AGE;
    advance();
    return { blockhash: current, blockHeight: height };
  },
};

function handleOne(req) {
  const id = req && req.id !== undefined ? req.id : null;
  try {
    if (!req || typeof req !== 'object' || typeof req.method !== 'string') {
      throw rpcError(-32600, 'Invalid Request');
    }
    const f = Object.prototype.hasOwnProperty.call(methods, req.method) ? methods[req.method] : null;
    if (!f) throw rpcError(-32601, 'Method not found');
    const params = req.params === undefined || req.params === null ? [] : req.params;
    if (!Array.isArray(params)) throw rpcError(-32602, 'Invalid params: expected an array');
    const result = f(params);
    return { jsonrpc: '2.0', result: result === undefined ? null : result, id };
  } catch (e) {
    if (e && e.rpc) return { jsonrpc: '2.0', error: e.rpc, id };
    return { jsonrpc: '2.0', error: { code: -32603, message: 'Internal error: ' + (e && e.message ? e.message : String(e)) }, id };
  }
}

// Request ids may be 64-bit integers that JavaScript numbers cannot hold; they are carried
// through as text and written back unchanged.
const RAWID = '~gpunex-raw-number~';
function protectIds(text) {
  return text.replace(/("id"\s*:\s*)(-?\d+)/g, (m, pre, num) => pre + '"' + RAWID + num + '"');
}

function stringify(obj) {
  const s = JSON.stringify(obj, (k, v) => (typeof v === 'bigint' ? RAWID + v.toString() : v));
  return s.replace(/"~gpunex-raw-number~(-?\d+)"/g, '$1');
}

function handleText(text) {
  let req;
  try {
    req = JSON.parse(protectIds(text));
  } catch (e) {
    return stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null });
  }
  if (Array.isArray(req)) {
    if (req.length === 0) return stringify({ jsonrpc: '2.0', error: { code: -32600, message: 'Invalid Request' }, id: null });
    return stringify(req.map(handleOne));
  }
  return stringify(handleOne(req));
}

// ---------------------------------------------------------------- servers

const server = http.createServer((req, res) => {
  if (req.method !== 'POST') {
    res.writeHead(req.url === '/health' ? 200 : 405, { 'content-type': 'text/plain' });
    res.end(req.url === '/health' ? 'ok' : 'use POST');
    return;
  }
  const chunks = [];
  let size = 0;
  let tooLarge = false;
  req.on('data', (c) => {
    size += c.length;
    if (size > 50 * 1024 * 1024) tooLarge = true;
    else chunks.push(c);
  });
  req.on('end', () => {
    let body;
    try {
      body = tooLarge ? stringify({ jsonrpc: '2.0', error: { code: -32600, message: 'request too large' }, id: null }) : handleText(Buffer.concat(chunks).toString('utf8'));
    } catch (e) {
      body = stringify({ jsonrpc: '2.0', error: { code: -32603, message: 'Internal error' }, id: null });
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(body);
  });
  req.on('error', () => {});
});
server.keepAliveTimeout = 60000;

// Websocket: signatureSubscribe / signatureUnsubscribe, plus any HTTP method.
if (WebSocketServer) {
  const wss = new WebSocketServer({ noServer: true });
  let nextSub = 1;
  server.on('upgrade', (req, socket, head) => {
    wss.handleUpgrade(req, socket, head, (ws) => wss.emit('connection', ws, req));
  });
  wss.on('connection', (ws) => {
    const live = new Set();
    ws.on('error', () => {});
    ws.on('close', () => live.clear());
    ws.on('message', (data) => {
      let req;
      try {
        req = JSON.parse(protectIds(data.toString('utf8')));
      } catch (e) {
        ws.send(stringify({ jsonrpc: '2.0', error: { code: -32700, message: 'Parse error' }, id: null }));
        return;
      }
      const id = req && req.id !== undefined ? req.id : null;
      try {
        if (req.method === 'signatureSubscribe') {
          const sig = b58encode(signatureParam((req.params || [])[0]));
          const sub = nextSub++;
          live.add(sub);
          ws.send(stringify({ jsonrpc: '2.0', result: sub, id }));
          const fire = (rec) => {
            if (!live.has(sub) || ws.readyState !== 1) return;
            live.delete(sub);
            ws.send(stringify({ jsonrpc: '2.0', method: 'signatureNotification', params: { result: { context: { slot: rec.slot }, value: { err: rec.err } }, subscription: sub } }));
          };
          const rec = txs.get(sig);
          if (rec) fire(rec);
          else {
            if (!waiters.has(sig)) waiters.set(sig, []);
            waiters.get(sig).push(fire);
          }
          return;
        }
        if (req.method === 'signatureUnsubscribe') {
          const sub = (req.params || [])[0];
          const had = live.delete(sub);
          ws.send(stringify({ jsonrpc: '2.0', result: had, id }));
          return;
        }
        ws.send(stringify(handleOne(req)));
      } catch (e) {
        const err = e && e.rpc ? e.rpc : { code: -32603, message: 'Internal error: ' + (e && e.message) };
        ws.send(stringify({ jsonrpc: '2.0', error: err, id }));
      }
    });
  });
}

const ticker = opts.slotMs > 0 ? setInterval(advance, opts.slotMs) : null;

function shutdown(code) {
  if (ticker) clearInterval(ticker);
  try {
    server.close();
  } catch (e) {
    // already closed
  }
  process.exit(code);
}

process.on('SIGTERM', () => shutdown(0));
process.on('SIGINT', () => shutdown(0));
process.on('uncaughtException', (e) => {
  process.stderr.write('localnet: uncaught exception: ' + (e && e.stack ? e.stack : e) + '\n');
});
process.stdin.on('end', () => shutdown(0));
process.stdin.on('close', () => shutdown(0));
process.stdin.on('error', () => shutdown(0));
process.stdin.resume();

server.on('error', (e) => {
  process.stderr.write('localnet: ' + e.message + '\n');
  process.exit(1);
});
server.listen(opts.port, opts.host, () => {
  const port = server.address().port;
  process.stdout.write(JSON.stringify({ url: 'http://' + opts.host + ':' + port, ws: 'ws://' + opts.host + ':' + port, genesis_hash: genesisHash }) + '\n');
});
