import socket, sys, threading, time
me=int(sys.argv[1]); n=int(sys.argv[2]); msg=int(sys.argv[3]); net=sys.argv[4]; rounds=int(sys.argv[5]); rate=float(sys.argv[6])
port=5600
srv=socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR,1); srv.bind((f"{net}.{me+1}",port)); srv.listen(8)
peers=[p for p in range(n) if p!=me]
inc={}
def acc():
    for _ in peers:
        c,_=srv.accept(); p=int(c.recv(1)[0]); inc[p]=c
t=threading.Thread(target=acc); t.start()
time.sleep(1.0)
out={}
for p in peers:
    s=socket.create_connection((f"{net}.{p+1}",port)); s.sendall(bytes([me])); out[p]=s
t.join()
buf=b"x"*msg
def snd(p): out[p].sendall(buf)
def rcv(p):
    left=msg
    while left>0: left-=len(inc[p].recv(min(left,1<<20)))
ts=[]
for r in range(rounds):
    t0=time.time()
    th=[threading.Thread(target=snd,args=(p,)) for p in peers]+[threading.Thread(target=rcv,args=(p,)) for p in peers]
    [x.start() for x in th]; [x.join() for x in th]
    ts.append(time.time()-t0)
ideal=msg*len(peers)*8/rate
print(me, "msg", msg, "round s", [round(x,3) for x in ts], "ideal", round(ideal,3), "eff", round(ideal*len(ts)/sum(ts),2))
