"""Training of Subspace Neural Physics (Holden et al. 2019, sections 4-5 and Algorithm 1).

Pipeline (one model per mesh and physics setup); the runtime is :mod:`core.methods.snp`:

1. **Sequences** (:func:`load_sequences`). Each bake becomes one sequence of its frames in
   the reference frame (the pins' rigid motion, :func:`core.methods.snp.reference_pose`; the
   world without moving pins), with one frame prepended, ``x_0 - dt v_0``: the state before
   the first, which is what a rollout starts from (``start_from``), so the first prediction
   is trained too. Each frame has its external features
   (:func:`core.methods.snp.external_features`: colliders from the bake's ``colliders``
   channel and sizes from its scenario, gravity and the frame's motion in the frame).
   Bakes of Blender's cloth (:mod:`core.clothbake`, opened by :func:`open_cloth_bakes`)
   carry their time step, gravity, pins and colliders in their metadata and their
   reference frame (the cloth object's world matrix) in a channel (:func:`driven_poses`);
   the model keeps the frame's rest transform and the cloth's triangles.
2. **Mean-centred PCA** of the training bakes' frames (:func:`mean_centred_pca`, sec. 5.1):
   ``u = k``, or the fewest modes whose largest vertex error on the training frames is
   within ``tolerance`` (1% of the bounding-box diagonal by default), at most ``max_k``.
   Checkpointed.
3. **The initial model** (:func:`fit_initial_model`, eq. 2): per mode, the least-squares
   ``[alpha_m beta_m]`` over every training frame ``t >= 2`` of every sequence (frames of two
   bakes are never paired).
4. **The external state's encoder** (:func:`fit_external_encoder`): training range (clipping,
   sec. 8.1), standardization, the features that varied, their PCA (``v = e`` by default).
5. **The residual network** (eq. 3, sec. 5.3-5.4, :class:`NetTrainer`): a ReLU MLP
   ``[z_bar, z_{t-1}, w] -> z_t - z_bar`` trained over every window of ``window`` frames of a
   training sequence (windows never cross two bakes), the first two frames given with noise,
   the rest predicted with the predictions fed back (:func:`rollout`, the runtime's
   arithmetic), the L1 loss of Algorithm 1 on positions and velocities in the subspace, and
   the gradient through the whole window; AMSGrad, a per-epoch learning-rate decay,
   batches of ``batch_size`` windows. Its last layer starts at zero, so training starts from
   the initial model. Checkpointed every ``checkpoint_every`` epochs.
6. Export to a float64 :class:`core.nnet.MLP`, checked against torch in float64 on a
   rollout; the held-out bakes rolled out in the subspace with the network, with the
   initial model alone, and projected on the PCA (the floor): their mean vertex errors are
   the metrics. Then :meth:`.run.TrainingRun.finish` writes the model and replays a held-out
   bake with it as a user loads it.

CPU defaults, and why they differ from the paper's (10 layers of 1.5u, learning rate 1e-4 with
decay 0.999, ~100 epochs of 1e5-1e6 frames, 10-48 hours on a GPU): our bakes are a few
hundred frames, so an epoch is a few batches and the paper's schedule would barely move the
weights. ``layers`` 4 (three hidden layers of 1.5u), ``learning_rate`` 3e-3 (automatic:
1e-3 past 40 PCA modes, :func:`learning_rate`, see the pressed block below) with decay 0.995
an epoch, the batch size and epochs chosen from the number of windows (:func:`schedule`:
batches of 8 to 32, ~3,200 steps, at most 100 epochs), no weight decay (see below). The
paper's network is ``layers=10`` (``width`` 0 is 1.5u, the default). Measured, with the
former 400 epochs of batches of 8 and Adam's weight decay 1e-2 (held-out mean vertex error,
network / initial model alone) on three
small bake sets, the former block of tests/test_snp.py (4 bakes of 48 frames, the sphere of
the hit block below), 5 scripted presses
of 40 frames and 6 wandering spheres of 32 frames: the paper's batch of 16 at learning rate
1e-3 without decay of the weights 0.985, 1.27 and 1.40; learning rate 3e-3, batches of 8:
0.90 on the block; with weight decay 1e-2: 0.86, 0.92 and 1.07 (1e-3: 0.89, 3e-2: 0.94, 1e-1:
0.93 on the block); noise 0.05 and 0.1 instead of 0.01 were worse (1.06, 1.54), as were 12
modes (1.2). With a handful of bakes the network learns the training paths (3.7x better
than eq. 1 on them) but hardly generalizes to an unseen collider path: the method needs
many bakes, as the paper's 1e5-1e6 frames say.

On Blender's cloth (tests/test_snp_cloth.py: a 144-vertex sheet hanging from its top row,
poked from the front by a keyframed ball, held out: one bake of 1,001 frames replayed from
rest), the mean vertex error over the initial model alone's: 10 training bakes of 161
frames, 80 epochs 0.72 (window 16: 0.75, noise 0.1: 1.40, no weight decay: 0.77, 160 epochs:
0.80, the held-out bake of 161 frames inside the training improving to 0.60 while the long
rollout got worse); 20 bakes, 40 epochs: 0.62 and 0.56 (two draws of collider paths), 8.4
and 7.0x the PCA floor. On a 256-vertex sheet, 8 bakes 0.82, 24 bakes (35 epochs, width 256)
0.78. More bakes is what helps; the settings barely do.

Per-mode input scaling (``mode_scaling``, on by default): the network sees each PCA
coordinate divided by its own standard deviation over the training frames, not all by the
first mode's ``s``, whose small modes' inputs were 10-100x smaller than the first's and
needed weights the weight decay pulls back. The cloth test's data (20 bakes of 161 frames,
held-out 1,000 frames replayed as Simulate plays them): 0.625x -> 0.590x the initial
model's error. A swinging owner (a 256-vertex sheet under a keyed empty that moves by up to
0.35 m and turns by up to 0.4 rad about each axis, 20 bakes of 161 frames, k = 32, 40
epochs; held out: 1,000 frames from rest, the cloth moving 405 mm on average; PCA floor
18.3 mm): the frame's velocity and acceleration taken at the world origin's image (before)
1.01x the initial model (212.5 mm), at the object's rest centre (``frame_origin``) 0.985x,
with per-mode scaling too 0.864x; the same models restarted from the bake's state every 32
frames 0.94x, 0.91x, 0.83x; weight decay 1e-3 instead of 1e-2 1.05x; 80 epochs 0.866x (as
40: not undertrained). Why the owner case is hard: the initial model leaves the cloth
hanging in the owner's frame, so its error is the swing relative to the owner, and a
prediction that swings with the right amplitude but drifts in phase over 1,000 frames
scores worse than not swinging at all; the network's error is still 10x the floor there, so
20 short bakes of random owner keys are too few.

Weight decay. Adam's own ``weight_decay`` is an L2 term added to the gradient before
AMSGrad normalizes it: while the zero last layer gives the hidden layers no loss gradient,
each hidden weight shrinks by about the learning rate a step, so with many windows an epoch
the network died before it learned (a flag of 20 Blender cloth bakes at the former default
1e-2: every weight ~1e-40, the model eq. (1) alone; 20 bakes of the block likewise). The
decay is now decoupled (AdamW's, Loshchilov & Hutter 2019) and pulls towards the *initial*
weights, ``p <- p - lr wd (p - p_0)`` a step (:meth:`NetTrainer.decay`): the last layer
towards zero (the initial model alone), the hidden ones towards their random start, never to
a dead network; its departure settles near ``1 / wd`` whatever the number of steps an epoch.
Measured (network / initial model alone): the cloth test's sheet (40 epochs of 32) weight
decay 0 0.52x and 0.53x (two seeds), 0.1 0.63x, 1 0.69x and 0.60x, 10 0.76x (Adam's 1e-2 as
before: 0.59x); the flag (40 epochs of 32) 0 0.91x, 1 0.85x, 10 0.83x (Adam's 1e-2: 0.88x);
the block (100 epochs of 8) 0 0.91x, 1 0.81x, 10 0.99x, and at 400 epochs 1 1.34x, 3 1.17x,
10 0.95x, 100 1.00x. No decay is the default: best on the cloth and within the noise
elsewhere (the three sets rank the values differently; the epochs matter more). On 20
bakes of the block (16 trained on, automatic 85 epochs of 8): weight decay 0 1.003x, 1
0.988x, 10 0.972x (Adam's former 1e-2: 0.969x, its network dead), with contact features
and no decay 1.106x: on FEM bake sets of this size the network hardly generalizes whatever
the decay, and a decay of 1-10 is the safer choice there (``weight_decay``).

A flag of 20 Blender cloth bakes (a 1.2 x 0.8 m sheet of 425 vertices pinned on its left
edge to a pole the bakes swing by up to 0.36 m and 0.4 rad about each axis, and a ball; 4
held out): the cloth moves 370 mm on average from its mean shape in the pole's frame, the
initial model alone misses by 331 mm, the PCA floor (60 modes) 17.8 mm. Blender's cloth is
chaotic there: the same held-out variants re-baked with the pole moved 0.1 mm differ from
the original bakes by 55-93 mm (mean vertex distance over 161 frames; up to 550-620 mm),
and at cloth quality 6 instead of 5 by 99-117 mm; re-baked unchanged, they are
bit-identical. The model's error is 3-4x that chaos floor, and it grows early: over the
first 30 frames (where the 0.1 mm re-bake differs by 0.1-7 mm) the initial model misses by
221 mm, the network by 164-255 mm; one step from the bake's own state both are near the
floor (21.8 and 26-31 mm). The network learns the training bakes (0.37x of the initial
model's error on them without weight decay) but generalizes little (0.83-0.91x held out),
and 60 more bakes (76 in all, 12 epochs of 32) did not help (1.0x on the same held-out
bakes): at this budget the network does not learn the flapping of a hard-swung flag.
The flag from the command line at the defaults (cloth-bake 20 variants, train, compare; 49
epochs of 32 windows, 82 s of network training on a loaded core): held-out 293 mm against
the initial model's 331 mm (0.886x; per bake 259, 302, 341 and 264 mm, max 1.06-1.71 m),
first 30 frames 169 against 221 mm (0.77x), one step 29.0 against 21.8 mm (1.33x), its
training bakes 0.32x. Its third hidden layer has 12 of 90 ReLUs active on a bake; at window
16 (learning rate 3e-3) none was: the network a constant, 1.01x. At learning rate 1e-3 the
flag did better (window 16 0.795x, window 32 0.872x) but the cloth test worse (0.572x,
0.593x against 0.52x) and the block with contact features too (0.794x, 0.926x against
0.675x): not the default below 40 modes, but the automatic rate past them (:func:`learning_rate`),
which the flag's 60 modes get.

Dead ReLUs (``dead_units`` in the metrics: per hidden layer, the share of units never
positive on any teacher-forced input of the training windows, :meth:`NetTrainer.activity`).
The flag at the defaults ends with 0%, 48% and 48% of its three hidden layers dead (seed 1:
0, 42, 36%), the cloth test's sheet 0, 8 and 14%, the block (contact features, 40 epochs)
0, 4 and 12%. Two remedies that keep the ReLU MLP (the runtime unchanged), measured as held-out error over the initial model alone's (flag: 4 held-out bakes,
49 epochs of 32; cloth: harness of tests/test_snp_cloth.py; block: tests/test_snp.py's):

* Re-initializing the dead units each epoch (fresh incoming weights, zero outgoing ones, so
  the output on the training inputs was unchanged; a ``revive_dead`` setting, since removed):
  flag 0.925x against 0.886x (485 revivals, none dead at the end), cloth 0.580x against
  0.518x, block 0.848x against 0.675x: the units stayed alive but the held-out error was
  worse everywhere. Dead units are not what holds these sets back.
* ``warmup_epochs``: the learning rate ramps up linearly, step by step. 5 epochs: flag 0.832x
  and 0.759x (seeds 0 and 1, against 0.886x and 0.882x; dead 10-13% instead of 36-48%),
  but cloth 0.620x and 0.590x (against 0.518x and 0.533x; dead 3% and 6% instead of 14% and
  25% in the last layer) and block 0.744x; 2 epochs: flag 0.902x, cloth 0.606x. It helps the flag and hurts the two tests' sets, so it is not the
  default; a user with a flag-like set (thousands of windows, a hard-swung cloth) may set it.

Dead units are not what holds the flag back: reviving them all made it worse, and the
warm-up's gain on the flag comes with fewer, not zero, dead units.

Keep the best epoch (``keep_best``, off by default): the network of the epoch whose rollouts
of the held-out bakes erred least (RMS in the subspace, checked every epoch; epoch 0 is the
initial model alone, so the kept network never does worse than eq. (1) there), checkpointed
with the run. Measured: the cloth test's sheet (one bake of 20 held out, the model judged on
a separate unseen 1,000-frame bake) 0.591x against 0.518x with the last epoch: one short
held-out bake picks the epoch poorly. On the flag (0.805x against 0.886x) and 60 FEM bakes of
the block (0.906x against 1.021x, epoch 42 of 49) it looked better, but there the same
held-out bakes picked the epoch and judged it, so those gains are biased.

Contact features (``contact_features``; :func:`core.methods.snp.contact_features`). Where the
error was on the former soft block of tests/test_snp.py (hit by a fast sphere; the block is now
pressed, see the next paragraph) (bench/snp.py --accuracy prints it): in the
frames where the sphere touches the block (a quarter of them) the rollout errs 35-45 mm, in
the free ones 6-15 mm, and with the paper's inputs the network did no better than eq. (1)
in contact, even one step from the bake's own states (teacher-forced: 1.3-2x eq. 1's error
on held-out contact frames, 0.45-0.8x on free ones). The sphere moves up to 4 m/s (17 cm a
frame at 24 fps, radius 10 cm) and touches for one to three frames: its end-of-frame
position does not say it passed through the block. Held-out mean vertex error over the
initial model's, the same 12 held-out bakes of 60, trained on the first N of the other 48
(weight decay 1e-4, learning rate 1e-3, 60 epochs; a scratch harness): without contact
features N = 4: 1.31x, 16: 0.975x, 48: 0.878x; the sweep's push-out projected on each PCA
mode: 0.960x, 0.918x, 0.858x; these five sweep numbers per collider (the feature kept): N =
16: 0.893x, the pipeline at N = 48: 0.845x; the collider's velocity: N = 48 0.908x. On the
20 bakes of bench/snp.py --accuracy (16 trained on, 100 epochs, the same weight decay and
rate): without 0.958x, the per-mode projection 1.40x, the velocity 1.48x, the penetration
of the network's own decoded prediction (in the rollout, differentiable) 1.15x, the five
numbers 0.940x. On the test's 4 bakes (3 trained on), default settings but epochs:
0.650x at 40 epochs, 0.659x at 60, 0.662x at 100 (without: 0.915x, 0.942x, 0.894x), but 0.86x at
150, 1.03x at 200 and 0.911x at 400 (without: 0.887x): the network fits three bakes' sweeps
(0.05-0.1x eq. 1's error on them) and then forgets how to generalize; the held-out error of
the validation rollouts would pick the epoch. That 0.659x is one held-out bake (v002, the
test's); the same bake held out of 20 (16 trained on, weight decay 1e-4, learning rate 1e-3,
100 epochs) 0.731x, but the other three 1.00x, 1.05x (the bake that moves 284 mm) and 1.01x,
0.940x in all (0.958x without the features; 0.98x at 20-30 epochs, where without them
0.96-1.24x). So the features help on every bake set measured, most where the data is
thinnest, but the issue's 0.6x holds for one held-out bake, not in general: over 12 held-out
bakes it is 0.845x with 48 bakes trained on. The network still fits the training bakes
3-10x better than unseen ones; more data of this kind helps slowly (the paper's bunny:
200,000 frames). At the defaults of no weight decay and automatic epochs (a later change;
the numbers above had Adam's coupled decay): 20 bakes 1.083x with the features, 1.091x
without; the 60 bakes (12 held out) 1.033x with, 7.08x without (that network drifts ~110 mm
on every held-out bake, where eq. 1 errs 2-86 mm).

The pressed block (tests/test_snp.py and bench/snp.py now; the ``keyframed_colliders``
scenario's presses, bench/snp.py's ``PRESSES``): the 216-tet block of before, clamped at its
base, pressed by a sphere of 10 cm radius 3 times a bake, up to 6 cm deep, at up to 1 m/s
(4 cm a frame at 24 fps; the fast sphere reached 0.74 m a frame), resting 0.2 s and sliding,
in contact 13 frames at a time on average (the fast sphere: 1-3 frames in 55 of its 131
contacts); 72 frames a bake. Held-out mean vertex error over the initial model alone's, the
same 12 held-out bakes of 48, trained on the first N of the other 36 (one core, load 2-7; at
the defaults, the automatic epochs, but where stated; "defaults" was contact features off and
learning rate 3e-3, "defaults now" is the automatic contact features and learning rate):

===========================  =======  =======  ===============  ===============
N bakes trained on           4        8        16               36
===========================  =======  =======  ===============  ===============
defaults (u auto)            0.868x   1.040x   0.948x (u = 49)  --
defaults now                 0.521x   0.466x   0.387x (u = 49)  0.368x (u = 60)
contact features             0.542x   0.481x   0.788x (u = 49)  --
  same, learning rate 1e-3   0.537x   --       0.387x           0.368x (u = 60)
  same, k = 24               --       0.495x   0.393x           0.392x
defaults, k = 24             --       --       0.614x           --
===========================  =======  =======  ===============  ===============

With contact features and learning rate 1e-3 the network's error is 10.7x, 15.7x and 23.5x
the PCA floor at 4, 16 and 36 bakes (the floor falls with the modes: 0.41, 0.21, 0.12 mm);
the network's own error 4.4, 3.2 and 2.9 mm against eq. (1)'s 7.9-8.4 mm. Training (one
loaded core, load 3-7): 4 bakes 40 epochs 9-39 s, 100 epochs 84-93 s; 16 bakes 47 epochs
108-195 s; 36 bakes 50 epochs 72-165 s. More bakes help little past 16: the
worst held-out bake stays at 0.72-0.82x from 8 bakes on (the best 0.2-0.35x).

The automatic modes (1% of the diagonal on the training frames) grow with the bakes (u = 18,
34, 49 at 4, 8, 16): at 16 bakes and u = 49 the network did not fit its own training bakes
within the automatic 47 epochs (0.86x there; 100 epochs: 0.517x held out), where 24 modes
reach 0.393x (the PCA floor 0.36 mm against the network's 3.3 mm: the modes are not what
limits). It is the learning rate with per-mode scaling: at u = 49, learning rate 1e-3
0.387x (training bakes 0.126x), per-mode scaling off 0.399x, no noise 1.073x (worse). Without
contact features the same failure is worse: 8 bakes (u = 34) 1.04x, the training bakes 1.06x;
bench/snp.py --accuracy's 20 bakes 1.311x with the features, 1.002x without. Per-mode scaling
divides the small modes' coordinates by their own small deviations; at 3e-3 the larger
inputs of many modes make AMSGrad's steps too big for the network to fit. Flooring the
per-mode scales at 0.1 s instead of 1e-3 s (at most 10x amplification) fixes it too: 16
bakes 0.384x; but the test's 4 bakes on the 12 held-out ones 0.546x against 0.510x (its own
pair 0.497x against 0.430x) and the cloth test's sheet 0.57x against 0.52x (load 5-8).
So the learning rate is automatic (:func:`learning_rate`): 3e-3 up to 40 modes (the cloth
test's sheet, k = 24: 0.52x, at 1e-3 0.572x; the block's 4 and 8 bakes, u = 18 and 34: 0.521x
and 0.466x at the new defaults), 1e-3 past them (the block's 16 and 36 bakes, u = 49 and 60;
the flag, u = 60: 0.872x against 0.886x at 3e-3). Measured at the new defaults (contact
features and learning rate automatic, epochs automatic; one core, load 3-6): 4, 8, 16 bakes
0.521x, 0.466x, 0.387x (training 82, 71, 61 s; the network fits its training bakes to 0.10x,
0.15x, 0.13x); 36 bakes (u = 60) 0.368x (130 s); bench/snp.py --accuracy --variants 20
--epochs 0 (16 trained on, u = 45) 0.508x (38.9 s), against 1.311x at the former defaults
with contact features and 1.002x without. The cloth test's data (tests/test_snp_cloth.py's
sheet, 20 bakes, the 1,000-frame held-out bake; 40 epochs of 32): at its k = 24 unchanged,
0.518x (3e-3, no contact features); at the automatic modes (u = 60) 0.521x with the
automatic 1e-3, 0.997x at 3e-3 (the network a no-op: the same failure as the block's).
Why not 1e-3 everywhere: the cloth test's k = 24 at 1e-3 0.593x (against 0.518x: the test's
0.6x bound all but gone), the block's 8 bakes (u = 34) 0.470x against 0.466x. On the
2,500-vertex sheet (bench/snp_cloth.py's; 20 bakes, 40 epochs, measured by the cloth
engineer) 1e-3 did as well or better at every k: k = 24 0.715x against 0.765x, k = 64 0.703x
against 4.33x (which the rule gives 1e-3). Per held-out bake with contact features the ratio spreads 0.24-0.87x (median 0.35-0.56
by N). The contact features are what the scene needs: without them 4 bakes give 0.87x and
the network fits its training bakes only to 0.21x (with: 0.11x); with them the colliders'
end-of-frame positions and the sweep's depth explain a press that lasts. The test's four
training bakes (v000, v001, v004, v005; 40 epochs, 9.3 s of training) on the 12 held-out bakes:
0.510x with contact features (its own two held-out bakes 0.430x), 0.911x without.
So they are automatic (``contact_features`` "auto", :func:`wants_contact`): on for soft-body
(FEM) bakes where a collider moves, off for Blender cloth bakes and where no collider moves
("on" / "off" choose; a former True / False reads as "on" / "off"). Off for cloth: on the
cloth test's sheet (a ball) they give 0.55x against 0.52x without (both within its 0.6x;
load 7), and the step at u = 64 costs 87.5 us with them against 27.5 without
(core.methods.snp). tests/test_snp.py's block trains at the defaults (but 40 epochs).

Generalization levers on the 2,500-vertex sheet (issue 11; bench/snp_cloth.py's 50 x 50
sheet and ball, k = 24, 40 epochs of 32 windows, one bake held out of the training, judged on
an unseen bake of 1,000 frames replayed from rest; held-out error over the initial model
alone's, training seeds 0 / 1 / 2; two runs at once on the shared 2-core machine, load 2-5):

* Blender's own chaos floor there: the held-out bake re-baked with the ball's keys moved by
  0.1 mm differs from it by 4.06 mm (mean vertex distance over the 1,000 frames; 0 over the
  first 100, before contact), at cloth quality 6 instead of 5 by 6.28 mm: 0.08x and 0.12x
  the initial model's 51.9 mm. The PCA floor (k = 24) is 5.8 mm (0.11x). Neither bounds the
  network (29.9-34.5 mm at the former defaults): what is left is generalization.
* 20 bakes of 160 frames at the defaults: 0.577 / 0.627 / 0.662. One lever at a time (seed 0
  unless said): Polyak averaging of the weights (an exponential moving average, decay 0.999
  a step) 0.606; noise on every fed-back state (of each mode's deviation) 0.01 0.599, 0.05
  2.62 (drifts); cosine decay of the rate 0.788; the paper's 10 layers 0.831; 80 epochs
  0.638; window 64 0.618; an ensemble of 3 (``ensemble``, its networks' residuals averaged)
  0.673 / 0.553 / 0.597. Within the seeds' spread (0.58-0.66) or worse. The averaging, the
  noise on every state, the cosine schedule and a gradient clipping (never measured on the
  cloth) were options for a day and were removed: none helped.
* The data's shape: 10 bakes of 320 frames instead of 20 of 160 (the same frames to bake;
  a bake starts at rest, its first contact 7-98 frames in, where the held-out replay is
  mostly cloth disturbed for hundreds of frames) 0.591 / 0.544; 5 of 640 0.892 / 3.48 (too
  few paths).
  With the ensemble: 2 networks 0.521 / 0.524 / 0.578, 3 networks 0.570 / 0.510 / 0.488.
  Training 10 x 320 frames: 42-45 s of network for one network, 59-110 s for two, 103-176 s
  for three (load 2-6). tests/test_snp_cloth.py takes 10 x 320 and an ensemble of 2.
* Other unseen paths: two more 1,000-frame bakes (seeds 1001, 1002), the same models (seeds
  0 / 1): 20 x 160, one network 0.964 / 0.764 and 0.848 / 0.869; 10 x 320, one network 0.885
  / 0.863 and 0.754 / 0.806; with 2 networks 0.732 / 0.772 and 0.751 / 0.690. Over the three
  paths the test's configuration averages 0.665 against 0.775: better everywhere, but the
  issue's 0.6x is met on the test's path (seed 1000), not on every path; at this data size
  (3,200 frames against the paper's 1e5-1e6) the network generalizes to about 0.7x.
* Twice the data, 20 bakes of 320 frames (seed 0; training 347-370 s at load 3, network 117 s
  for one network, 141 s for two): the mean vertex error on the three unseen paths 25.6,
  28.3 and 30.9 mm with one network, 23.4, 28.4 and 28.8 mm with two, against 25.6, 31.3 and
  37.8 mm for 10 x 320 with two and 29.9, 45.2 and 43.9 mm for 20 x 160 with one. The ratio
  reads 0.35-0.50x there, flattered: the initial model fitted on these bakes errs more
  (56-68 mm against 43-52 on the same paths). More long bakes are what generalizes.
* The pressed block (bench/snp.py --accuracy --variants 20 --epochs 0, one pinned core): 2
  networks 0.535x (50.3 s) against one 0.508x (36.2 s). So ``ensemble`` stays 1 by default.

Cloth on a walking character (issue 30; a 20 x 30 cape, 0.6 x 0.9 m, Blender's default
cloth, on a cylinder torso that is its owner and a capsule collider, walking 1 m/s and
turning 60 degrees; 16 bakes of 121 frames drawn from the walk by :mod:`core.motion`, 3 held
out, 60 modes, the CLI's defaults; replayed from rest as Simulate plays them). With the
noise on a window's first two frames drawn at 0.01 of the *first* mode's spread for all 60
modes (the default): held-out mean 35.7-38.2 mm, max 177-242 mm (16-22% of the diagonal), the
user's own 200-frame walk 35.3 mm (a cape glued to the torso 88.3 mm, the alpha/beta model
alone 68.8 mm); the closest shapes 0.5-1.0 mm, so the basis is not the limit. Restarted from
Blender's own state every K frames (its z set from the bake's frames, a scratch harness),
the model erred 19.9 mm after *one* step where the alpha/beta model alone erred
1.7 mm: a bias the network learnt from starts shaken far outside the small modes' ranges
(the 60th mode's spread is a few percent of the first's). Noise 0.001 instead: 27.4-28.8
mm, one step 9.0 mm; noise at 0.01 of *each mode's own* spread (a local patch): 20.9-28.2
mm held out (0.28-0.34x glued, 25-43x the closest shapes), max 97-188 mm (9-17%), the
user's walk 20.9 mm, one step 8.8 mm; but on tests/test_snp_cloth.py's poked sheet it gave
0.631x the alpha/beta model against the default's 0.521x (the test asserts 0.6x).
Windows of 8 frames instead of 32: worse (43.7 mm in the subspace against 37.3). The rollout
grows (one step 8.8 mm, 16 steps 19.7, 64 steps 26.1 on a held-out bake); the frame's
velocity, acceleration and angular velocity are inputs already, in the moving frame. A skirt
on an armature's hip bone (walk, run, stop, spin; 16 x 121 frames, the earlier noise): held
out 2.4-4.0 mm mean, 3.1-3.4x the closest shapes, 0.19-0.30x glued, max 2-5% of the diagonal.

The noise floor (``noise_floor``, :func:`noise_scales`; issue 30 again). The noise of mode m
is ``noise`` times its own spread, at least ``noise_floor`` times the first mode's (1: the
former rule). bench/snp_cloth.py's 20 x 30 cape (0.5 x 0.75 m, the same torso and walk), 16
training bakes of 121 frames drawn from the walk (3 held out by the trainer), judged on 3
more drawn variants of 121 frames (another seed), the file's own walk (200 frames, standing
after 121), a run-to-stop (2.5 m/s, stopped within 0.33 s) and a whole turn in
1 s (``tests/cloth_scenes.build_cape``'s ``motion``), replayed from rest; mean (max) mm, load
15-20:

==========================  ==============================  ==========  ========  ==========
training                    held-out variants               user's walk run-stop  spin
==========================  ==============================  ==========  ========  ==========
floor 1 (former default)    21.4, 27.1, 25.8 (170-294)      17.7        32.3      116.7 (1042)
floor 0                     17.2, 26.0, 18.5 (174-280)      13.8        32.3      110.4
floor 0.1                   16.2, 27.6, 21.1 (133-258)      12.0        32.6      109.5
floor 0.1, 32 bakes         14.8, 27.0, 12.9 (85-235)       10.3        32.4      106.7
floor 0.1, width 256        15.2, 22.9, 17.2 (128-270)      10.4        32.4      111.6
floor 0.1, window 64        17.2, 25.3, 19.5 (139-370)      11.4        35.0      109.4
floor 0.1, 100 epochs       15.6, 26.1, 19.0 (117-251)      14.2        35.8      109.2
floor 0.1, 3 actions        25.1, 34.3, 29.0 (158-312)      17.6        88.4      41.5 (276)
==========================  ==============================  ==========  ========  ==========

A cape glued to the torso errs 76.8, 122.8, 119.5 / 56.5 / 99.2 / 117.0 mm, the alpha/beta
model alone 65-105 / 68.0 / 97.6 / 151.7, the closest shapes 1.0-1.8 / 0.75 / 1.05 / 5.96.
Blender's own chaos floor there: each held-out bake re-baked with the cloth 1e-4 heavier
differs from it by 0.05, 3.16 and 0.86 mm mean (max 8, 70, 25 mm), the user's walk by 0.30
mm (max 21); at quality 6 instead of 5 by 2.1-9.0 mm (max 54-112); re-baked unchanged,
bit-identical. So the walking cape is far less chaotic than the swung flag above, the goal of
3x the closest shapes (3-5 mm) stands, and none of the levers gets near it: the model's error
is 8-24x the closest shapes whatever the noise, data or width. It is not only
generalization: replayed from rest on four of its own *training* bakes the model errs 15.9-21.0
mm at floor 1 and 8.7-13.9 mm at floor 0.1 (the held-out 16-28 mm): the network does not fit
the long rollout of the bakes it learns from, and longer windows (64) or twice the epochs
(100) do not change that (the table). Restarted from Blender's own state every K
frames (the three held-out variants; mean mm over the frames after each restart): K = 1, 4,
16, 64 floor 1 9.9-11.0, 11.8-15.1, 18.5-22.4, 21.2-27.2; floor 0.1 4.8-6.1, 7.1-10.9,
13.1-19.6, 16.9-25.7; the alpha/beta model alone 2.4-5.0, 8.6-16.5, 33.8-69.4, 49.1-94.4. The
smaller noise halves the network's one-step bias, yet one step from Blender's state it is
still worse than eq. (1) alone, and the error keeps growing over 64 frames. Floor 0.1 on tests/test_snp_cloth.py's
poked sheet (owner still): 0.562x / 0.587x the alpha/beta model (training seeds 0 / 1;
floor 1: 0.521x / 0.524x), within the test's 0.6x but with little margin: so the automatic
floor (:func:`noise_floor`) is 0.1 where the reference frame moves in a training bake
(cloth on a character) and 1 where it does not. Two assets of our own through the CLI at
the defaults (16 bakes of 121 frames, 3 held out, plus the file's 150-frame shot), floor 0.1
against 1, mean (max) mm: a hero's cape (18 x 18 vertices, 0.6 x 0.95 m, on a box torso with
a capsule collider that walks, turns a corner and stops) 14.8-19.3 (95-171) and the shot 14.6
against 19.9-22.6 (103-159) and 22.8, glued 50-75; a flag (14 x 14, 0.8 x 0.5 m, pinned
along a pole that walks, stops, spins a whole turn and walks back) 99.2-111.4 (474-603) and
the shot 133.5 (683) against 96.3-103.3 (339-392) and 112.6 (393), glued 368-466, closest
shapes 4.1-6.6: the flag does better at 1 (a hard-swung cloth, as the flag above), where
every lever leaves it 15-25x the closest shapes. Not one rule for every cloth: a flag's
user may set *Noise Floor* 1. Width 256 and 32 bakes help a little more,
but the width makes the step ~5x the multiply-adds (over the 60 us goal) and the data twice
the baking: left to the user (*Width*, *Variants*). A whole turn in 1 s is outside what
variants of a walk contain (the glued cape does as well); with the file's run-to-stop and
spin as actions of the torso (variants drawn from the three in turn) the spin falls to 41.5
mm (0.35x glued) but the run-to-stop rises to 88.4 (max 928 mm) and the walk's variants to
25-34 mm: with 16 bakes of three motions each motion is thinly sampled.

The ensemble's networks train side by side (:class:`Ensemble`: one batched product a layer,
each member rolling out its own predictions from the same windows and noise, its own random
start) and are exported as one MLP of K times the width (block-diagonal hidden layers), so
the runtime is unchanged. The step at u = 64 (the 2,500-vertex sheet, one pinned core, load
0.5, the least of 10 blocks of 100 frames, three rounds): one network 24.5 us, 2 networks
35.8 us, 3 networks 50.9 us (the issue's goal: at most 60 us); a runtime that knew the blocks
could skip the zeros, which is not needed there.

Resume. The checkpoints (:class:`.run.Checkpoints`) are the PCA basis and the network
(its weights, AMSGrad's state, the epoch, the loss history). A killed run started again with
the same bakes and settings continues from the last checkpoint; the epochs draw nothing from
a stateful generator (window order and noise of epoch ``e`` are keyed by ``(seed, e)``), so on
the CPU the resumed run ends with the uninterrupted run's weights.

torch is imported here and in the other trainers, never in ``core``.
"""

from .data import (
    LR_MODES,
    Sequence,
    collider_slots,
    fit_external_encoder,
    fit_initial_model,
    fit_normal_model,
    learning_rate,
    load_sequences,
    mean_centred_pca,
    normal_angles,
    wants_contact,
)
from .network import Ensemble, NetTrainer, noise_floor, noise_scales, rollout, window_loss, windows
from .trainer import heldout_errors, latent_rollout, train

__all__ = [
    "LR_MODES",
    "Ensemble",
    "NetTrainer",
    "Sequence",
    "collider_slots",
    "fit_external_encoder",
    "fit_initial_model",
    "fit_normal_model",
    "heldout_errors",
    "latent_rollout",
    "learning_rate",
    "load_sequences",
    "mean_centred_pca",
    "noise_floor",
    "noise_scales",
    "normal_angles",
    "rollout",
    "train",
    "wants_contact",
    "window_loss",
    "windows",
]
