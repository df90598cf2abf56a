#!/usr/bin/env node
// Writes tests/data/gpt2/parity.jsonl: varied real text, one {"text", "ids"} object a line, with the
// ids given by the reference GPT-2 encoder of the npm package gpt-3-encoder (its Encoder.js).
// meg's Gpt2BpeTokenizer must reproduce every line exactly (tests/unit/test_gpt2_bpe.cpp).
//
// The text comes from what Debian installs: fortune cookies, copyright files and changelogs,
// manual pages in many languages, message catalogs in ~40 languages, C headers; plus hand-written
// Unicode and whitespace stress strings. A developer script, not run by the tests:
//
//   apt-get install nodejs npm fortunes manpages-de manpages-fr manpages-ja manpages-ru manpages-zh
//   cd /tmp && npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz
//   node scripts/gen-gpt2-parity.js /tmp/package > tests/data/gpt2/parity.jsonl
//
// The selection is deterministic for a given machine; other package versions give other text. Run it
// with the Node that made lib/tokenizer/unicode_tables.* (its header says which): the regex classes of
// \p{L} and \p{N} follow Node's Unicode version.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { execFileSync } = require('child_process');

const pkg = process.argv[2] || '/tmp/package';
const data = path.join(__dirname, '..', 'tests', 'data', 'gpt2');
for (const [theirs, ours] of [['encoder.json', 'vocab.json'], ['vocab.bpe', 'merges.txt']]) {
  if (!fs.readFileSync(path.join(pkg, theirs)).equals(fs.readFileSync(path.join(data, ours))))
    throw new Error(`${pkg}/${theirs} differs from tests/data/gpt2/${ours}`);
}
const { encode } = require(path.resolve(pkg, 'Encoder.js'));

const utf8 = new TextDecoder('utf-8', { fatal: true });
function text(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;  // not UTF-8 (some old copyright files are Latin-1): skip
  }
}

function files(dir, pattern) {
  const out = [];
  const walk = (d) => {
    let entries;
    try {
      entries = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && pattern.test(p)) out.push(p);
    }
  };
  walk(dir);
  return out;
}

// Every k-th item, spread evenly over LIST, to take COUNT of them.
const spread = (list, count) => list.filter((_, i) => i % Math.max(1, Math.floor(list.length / count)) === 0).slice(0, count);

// The first whole lines of S up to about MAX characters.
function head(s, max) {
  if (s.length <= max) return s;
  const cut = s.lastIndexOf('\n', max);
  return s.slice(0, cut > 0 ? cut + 1 : max);
}

const docs = [];
const add = (s) => s && s.trim() && docs.push(s);

// Fortune cookies: short English texts, quotes, ASCII art.
for (const f of files('/usr/share/games/fortunes', /\/[a-z-]+$/)) {
  const cookies = (text(fs.readFileSync(f)) || '').split('\n%\n');
  spread(cookies, 6).forEach(add);
}
// Copyright files and Debian changelogs: legalese, names from everywhere, e-mail addresses, dates.
for (const f of spread(files('/usr/share/doc', /\/copyright$/), 15)) add(head(text(fs.readFileSync(f)) || '', 1200));
for (const f of spread(files('/usr/share/doc', /\/changelog\.Debian\.gz$/), 12))
  add(head(text(zlib.gunzipSync(fs.readFileSync(f))) || '', 1200));

// Manual pages, rendered as man shows them: column layout, many spaces, hyphenation.
function manPage(f) {
  const env = { ...process.env, MANWIDTH: '80', LANG: 'C.UTF-8' };
  try {
    const out = execFileSync('sh', ['-c', 'man -E UTF-8 -l "$1" 2>/dev/null | col -bx | head -c 8000', 'sh', f],
      { env, stdio: ['ignore', 'pipe', 'ignore'], timeout: 30000 });
    return text(out.subarray(0, out.lastIndexOf(10) + 1));  // whole lines: head may cut a character
  } catch {
    return null;  // some pages hang groff; skip them
  }
}
for (const lang of ['man1', 'de', 'fr', 'ja', 'ru', 'zh_CN', 'zh_TW', 'ko', 'uk', 'pl', 'es', 'it', 'pt_BR', 'cs', 'sv'])
  for (const f of spread(files(path.join('/usr/share/man', lang), /\.gz$/), 3)) add(head(manPage(f) || '', 1100));

// Message catalogs: the translated strings of a .mo file (GNU gettext format).
function catalog(f) {
  const b = fs.readFileSync(f);
  const le = b.readUInt32LE(0) === 0x950412de;
  const u32 = (o) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const strings = [];
  for (let i = 1; i < u32(8); i++) {  // entry 0 is the header
    const at = u32(16) + 8 * i;
    const s = text(b.subarray(u32(at + 4), u32(at + 4) + u32(at)));
    if (s) strings.push(s.replaceAll('\0', '\n'));
  }
  return strings;
}
const scripts = ['am', 'ar', 'bn', 'el', 'fa', 'gu', 'he', 'hi', 'hy', 'ja', 'ka', 'km', 'kn', 'ko', 'lo', 'ml',
  'mr', 'my', 'ne', 'pa', 'ru', 'si', 'ta', 'te', 'th', 'ti', 'ug', 'uk', 'ur', 'vi', 'yi', 'zh_CN', 'zh_TW', 'tr',
  'pl', 'cs', 'eo', 'dv', 'iu', 'chr'];
for (const lang of scripts) {
  const mos = files(path.join('/usr/share/locale', lang, 'LC_MESSAGES'), /\.mo$/)
    .filter((f) => !/iso_|glib20|gtk/.test(f));  // skip the huge country/language name lists
  for (const f of spread(mos, 1)) add(head(spread(catalog(f), 30).join('\n'), 800));
}

// Source code: C and C++ headers.
for (const f of spread(files('/usr/include', /\.(h|hpp)$/), 16)) add(head(text(fs.readFileSync(f)) || '', 1500));

// Hand-written stress strings: the corners of the pattern and of the byte-level encoding.
[
  'Hello world', 'Hello, world!', ' Hello', '  Hello', 'Hello  world', 'hello\nworld', 'a', ' ', '  ', '\n',
  '\n\n\n', '\t', 'a\tb', 'a \tb', 'a\t b', 'word \n', 'trailing spaces   ', '   leading spaces', ' \n \n x',
  'line1\r\nline2\r\n', '\r', 'a\r\rb', 'a\u000bb\u000cc', '  \t\n  word', 'x \u00a0 y', 'a\u00a0b', 'a\u3000b',
  ' \u3000 ', 'a\u2009b\u200ac', '\u2028line\u2029para', '\ufeffbyte order mark', 'next\u0085line', '\u200bzero width',
  '\u180emongolian', '\u1680ogham\u1680', 'tab\t\t\tthen text', '\u00a0\u00a0x', ' \u00a0x', '\u00a0 x',
  "I'll've", "don't", "DON'T", "it's", "'s", "'S", "''", "'''", "rock 'n' roll", "y'all'd've", "'twas",
  "o'clock", "He said 'hello'", "it\u2019s", "' s", "'re'll've'd", "I'm", "we'd've", "'ll 'm 'd 't 've 're",
  "can't won't shouldn't", "'sup", "x's'", "!'s", " 's", "''s", "'\u00e9", "I'M", "a'b'c",
  '\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669', '\u06f0\u06f1\u06f2\u06f3', 'देवनागरी ०१२३४५६७८९',
  'বাংলা ০১২৩', 'ไทย ๐๑๒๓', 'CJK numbers 一二三 〇', '①②③ ⑩', 'Roman Ⅻ ⅷ', '½ ¾ ²³ ¹', '１２３ fullwidth',
  '𝟘𝟙𝟚 math digits', '3.14159', '1,000,000', '0x1F600', '2024-01-01T12:00:00Z', 'v1.2.3-rc.4', '12abc34',
  'abc123def', '١٢٣abc', '๑a๒b',
  '東京は日本の首都です。', '我爱北京天安门', '한국어 텍스트입니다', '日本語のテキスト、カタカナ、ひらがな',
  '中文，标点。符号！', '𠮷野家', '𪚥 rare ideograph', 'ｶﾀｶﾅ halfwidth', 'ㄅㄆㄇ bopomofo',
  '😀', '👩‍👩‍👧‍👦 family', '👍🏽 skin tone', '🇯🇵🇺🇸 flags', '❤️ with VS16', '🏳️‍🌈', '1️⃣ keycap',
  'emoji😀inside😀words', '🤷‍♀️', ' 😀 ', '😀😀😀',
  'e\u0301', 'caf\u00e9 vs cafe\u0301', 'Z̤̙̬a̸̢l̸g̶o̷ text', 'ḁ̷̛͖', 'नमस्ते दुनिया', 'ส้มตำ', '\u0301 lone combining mark',
  'a\u0308\u0304 stacked marks', 'ﬁ ligature', 'Å Å Å (A ring, angstrom)',
  'مرحبا بالعالم', 'שלום עולם', 'עִבְרִית', 'Hello مرحبا mixed', '\u202eRLO override\u202c',
  '\u200fRLM\u200e LRM', 'فارسی: ۱۲۳', 'ܐܪܡܝܐ', 'ދިވެހި',
  'Ελληνικά', 'Русский язык', 'ქართული', 'Հայերեն', 'ᚠᛇᚻ runes', '𝔉𝔯𝔞𝔨𝔱𝔲𝔯', 'ℌ℮ℓℓ𝑜', 'ᏣᎳᎩ Cherokee',
  'ꯃꯤꯇꯩ', '𐌰𐌱𐌲 Gothic', 'ⴰⵣⵓⵍ Tifinagh', 'ᐃᓄᒃᑎᑐᑦ',
  '!', '?', '...', '—', '–', '…', '«»', '“quotes”', '‘single’', '¡Hola!', '¿Qué?', '<|endoftext|>',
  'text <|endoftext|> more', '$$$', '@#%^&*()', 'C++', 'a/b\\c', '{}', '[]', '#include <stdio.h>',
  'http://example.com/path?q=1&r=2#frag', 'user@example.com', '```code```', '~~~', '=====', '----', '____',
  '***', '!!!???', ' !', '  !', '. . .', '"quoted"', '(parenthesised)', '[[wiki]]', '--flag=value', '-1', '+1',
  '\u0000', 'a\u0000b', '\u0001\u0002\u001f', '\u007f', '\u0080\u0081\u009f', 'soft\u00adhyphen',
  '\ue000\uf8ff private use', '\u{10ffff}', '\ufffd', '\ufffe', '\u{1f600}\u{e0001}', '\u{f0000}',
  'x²+y²=z²', 'H₂O', '25°C', '€100 £50 ¥1000 ₹5', '10km/h', 'naïve coöperate', 'ß ẞ', 'İstanbul ı',
  'a'.repeat(1000), 'ab'.repeat(500), '='.repeat(300), ' '.repeat(100) + 'x', '\n'.repeat(50), '1'.repeat(200),
  '我爱北京天安门'.repeat(80), '😀'.repeat(50), ' a'.repeat(200), '\t'.repeat(30) + 'x', 'ab\u00a0'.repeat(40),
  'The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX! the_quick_brown_fox; theQuickBrownFox',
  'def f(x):\n    return x ** 2  # square\n\n\tif x:\n\t\tpass\n',
  '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
].forEach((s) => docs.push(s));

for (const s of docs) process.stdout.write(JSON.stringify({ text: s, ids: encode(s) }) + '\n');
