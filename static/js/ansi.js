// ANSI escape sequences in one log line -> styled runs of plain text.
//
// A pure function with no DOM: the viewer turns each run into a text node (never
// innerHTML), so log text cannot become markup whatever bytes a command prints.
// Colours are kept (SGR); everything else that would move a cursor, clear a screen,
// set a title or carry a hyperlink (OSC 8) is dropped, since a log is not a terminal
// and a link from untrusted output must not become clickable.
(function (root) {
  "use strict";

  const ESC = "\x1b";
  const PLAIN = Object.freeze({ fg: null, bg: null, bold: false, dim: false, italic: false, underline: false });

  // xterm's 6x6x6 cube and grey ramp, for 38;5;n and 48;5;n above the 16 named colours.
  function colour256(n) {
    if (n < 16) return n;
    if (n >= 232) {
      const v = 8 + (n - 232) * 10;
      return `rgb(${v}, ${v}, ${v})`;
    }
    const i = n - 16;
    const level = (c) => (c === 0 ? 0 : 55 + c * 40);
    return `rgb(${level(Math.floor(i / 36))}, ${level(Math.floor(i / 6) % 6)}, ${level(i % 6)})`;
  }

  function byte(v) {
    return Math.max(0, Math.min(255, v | 0));
  }

  // One SGR sequence applied to a style; returns a new style (styles are shared by spans).
  function applySgr(style, params) {
    const s = Object.assign({}, style);
    // "38:5:n" (colons) and "38;5;n" (semicolons) mean the same; read both as one list.
    const codes = params === "" ? [0] : params.split(/[;:]/).map((p) => (p === "" ? 0 : parseInt(p, 10)));
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) Object.assign(s, PLAIN);
      else if (c === 1) s.bold = true;
      else if (c === 2) s.dim = true;
      else if (c === 3) s.italic = true;
      else if (c === 4) s.underline = true;
      else if (c === 22) s.bold = s.dim = false;
      else if (c === 23) s.italic = false;
      else if (c === 24) s.underline = false;
      else if (c >= 30 && c <= 37) s.fg = c - 30;
      else if (c >= 90 && c <= 97) s.fg = c - 90 + 8;
      else if (c === 39) s.fg = null;
      else if (c >= 40 && c <= 47) s.bg = c - 40;
      else if (c >= 100 && c <= 107) s.bg = c - 100 + 8;
      else if (c === 49) s.bg = null;
      else if (c === 38 || c === 48) {
        const key = c === 38 ? "fg" : "bg";
        if (codes[i + 1] === 5 && i + 2 < codes.length) {
          s[key] = colour256(byte(codes[i + 2]));
          i += 2;
        } else if (codes[i + 1] === 2 && i + 4 < codes.length) {
          s[key] = `rgb(${byte(codes[i + 2])}, ${byte(codes[i + 3])}, ${byte(codes[i + 4])})`;
          i += 4;
        } else {
          break; // malformed: ignore the rest rather than misread it as other codes
        }
      }
      // Anything else (blink, inverse, fonts, ...) is ignored.
    }
    return Object.freeze(s);
  }

  // Index just past a string terminator (BEL, ESC \ or C1 ST) from `i`; end of text if none.
  function skipString(text, i) {
    for (; i < text.length; i++) {
      const ch = text[i];
      if (ch === "\x07" || ch === "\x9c") return i + 1;
      if (ch === ESC && text[i + 1] === "\\") return i + 2;
    }
    return text.length;
  }

  /**
   * Parse one log line.
   *
   * 1. Walk the text once; printable characters accumulate into the current span.
   * 2. CSI sequences (ESC [ or C1 0x9b): `m` changes the style, any other is dropped.
   * 3. OSC, DCS, SOS, PM and APC strings are dropped up to their terminator.
   * 4. `\r` drops what the line held so far (a progress bar keeps its last state),
   *    except at the very end, where it is the tail of a CRLF.
   * 5. Other control characters are dropped; a backspace erases the character before.
   *
   * `style` is the style in force at the start (colours carry over to the next line
   * of the same stream); the result has the spans and the style in force at the end.
   */
  function parse(text, style) {
    let current = style || PLAIN;
    let spans = [];
    let buffer = "";
    const flush = () => {
      if (!buffer) return;
      const last = spans[spans.length - 1];
      if (last && last.style === current) last.text += buffer;
      else spans.push({ text: buffer, style: current });
      buffer = "";
    };
    const end = text.replace(/\r+$/, "").length;
    let i = 0;
    while (i < end) {
      const ch = text[i];
      const code = ch.charCodeAt(0);
      if (ch === ESC || ch === "\x9b" || ch === "\x9d" || ch === "\x90") {
        const kind = ch === ESC ? text[i + 1] : { "\x9b": "[", "\x9d": "]", "\x90": "P" }[ch];
        let j = ch === ESC ? i + 2 : i + 1;
        if (kind === "[") {
          const start = j;
          while (j < end && text.charCodeAt(j) >= 0x20 && text.charCodeAt(j) <= 0x3f) j++;
          const final = text[j];
          if (final === "m") {
            flush();
            const params = text.slice(start, j);
            // Private or intermediate bytes (e.g. "?25") are not SGR: drop the sequence.
            if (/^[0-9;:]*$/.test(params)) current = applySgr(current, params);
          }
          i = j < end ? j + 1 : end;
        } else if (kind === "]" || kind === "P" || kind === "X" || kind === "^" || kind === "_") {
          i = skipString(text, j);
        } else if (kind === undefined) {
          i = end;
        } else {
          // Short escapes (ESC 7, ESC c, ESC ( B): intermediates 0x20-0x2f, then a final.
          j = i + 1;
          while (j < end && text.charCodeAt(j) >= 0x20 && text.charCodeAt(j) <= 0x2f) j++;
          i = Math.min(j + 1, end);
        }
      } else if (ch === "\r") {
        buffer = "";
        spans = [];
        i++;
      } else if (ch === "\b") {
        if (buffer) buffer = buffer.slice(0, -1);
        else if (spans.length) {
          const last = spans[spans.length - 1];
          last.text = last.text.slice(0, -1);
          if (!last.text) spans.pop();
        }
        i++;
      } else if ((code < 0x20 && ch !== "\t") || code === 0x7f || (code >= 0x80 && code < 0xa0)) {
        i++;
      } else {
        buffer += ch;
        i++;
      }
    }
    flush();
    return { spans, style: current };
  }

  const api = { parse, PLAIN };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.BerthAnsi = api;
})(typeof window !== "undefined" ? window : this);
