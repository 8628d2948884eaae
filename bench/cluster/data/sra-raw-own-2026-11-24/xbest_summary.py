# One line per row of the given JSONL files: time, best uncompressed path, x_best, wire busbw, CPU.
# python3 xbest_summary.py FILE...
import json,sys,glob,os
link=float(sys.argv[1]) if len(sys.argv)>1 and not sys.argv[1].endswith('l') else 1e9
files=[f for f in sys.argv[1:] if f.endswith('.jsonl')]
for f in sorted(files):
    for l in open(f):
        if not l.startswith('{"collective'): continue
        r=json.loads(l)
        wbus=r['wire_bytes']*8/r['time_s']/1e9
        c=r['cpu']
        print(f"{os.path.basename(f):22s} {r['codec']:7s}{r['bits']} {r['size']>>20:3d}M {r['time_s']*1e3:7.1f} ms best {r['best_uncompressed_time_s']*1e3:7.1f} ({r['best_uncompressed']}) x_best {r['speedup_vs_best']:6.2f} wirebus {wbus*100:5.1f}% wrong={r['wrong']} chk={r['checked']} proc {c['process_s']*1e3:5.1f} sys {c['process_sys_s']*1e3:5.1f} enc {c['encode_s']*1e3:5.1f} dec {c['decode_s']*1e3:5.1f} idle {c['idle_s']*1e3:5.1f}")
